package openloop

// Endpoint is the OpenAI API a run drives.
type Endpoint string

// The endpoints.
const (
	// EndpointCompletions is POST /v1/completions with a token-id (or, for a
	// dataset, text) prompt; the default.
	EndpointCompletions Endpoint = "completions"
	// EndpointChat is POST /v1/chat/completions with the prompt as one user
	// message, rendered as text (see promptText). Chunks carry
	// choices[0].delta.content; the usage chunk comes last, as for
	// completions. The engine applies its chat template, so the prompt tokens
	// recorded are the engine's usage.prompt_tokens.
	EndpointChat Endpoint = "chat"
)

// Endpoints lists the valid endpoints.
var Endpoints = []Endpoint{EndpointCompletions, EndpointChat}

// Validate reports an endpoint that is not one of Endpoints ("" is
// completions).
func (e Endpoint) Validate() error {
	switch e {
	case "", EndpointCompletions, EndpointChat:
		return nil
	}
	return fieldErr("endpoint", "completions or chat", "%q is not completions or chat", string(e))
}

// Path is the endpoint's HTTP path.
func (e Endpoint) Path() string {
	if e == EndpointChat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// promptWords is the vocabulary a token-id prompt is rendered in when it has
// to go as text (the chat endpoint): token id t becomes promptWords[t % n].
// They are common English words, one token each (with their leading space)
// in the BPE vocabularies of common models, so a prompt of n ids is about n
// tokens; the engine's usage.prompt_tokens is what is recorded. The
// simulated engine counts one token per word, exactly n.
var promptWords = [...]string{
	"time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family", "student", "group",
	"country", "problem", "hand", "part", "place", "case", "week", "company", "system", "program", "question", "work", "government", "number", "night", "point",
	"home", "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word",
	"business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law",
	"car", "city", "community", "name", "president", "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others", "level",
	"office", "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy", "moment",
	"air", "teacher", "force", "education", "foot", "boy", "age", "policy", "music", "market", "sense", "nation", "plan", "college", "interest", "death",
	"experience", "effect", "class", "control", "care", "field", "development", "role", "effort", "rate", "heart", "drug", "show", "leader", "light", "voice",
	"wife", "police", "mind", "price", "report", "decision", "son", "view", "relationship", "town", "road", "arm", "difference", "value", "building", "action",
	"model", "season", "society", "tax", "director", "position", "player", "record", "paper", "space", "ground", "form", "event", "official", "matter", "center",
	"couple", "site", "project", "activity", "star", "table", "need", "court", "oil", "situation", "cost", "industry", "figure", "street", "image", "phone",
	"data", "picture", "practice", "piece", "land", "product", "doctor", "wall", "patient", "worker", "news", "test", "movie", "north", "love", "support",
	"technology", "step", "baby", "computer", "type", "attention", "film", "tree", "source", "organization", "hair", "window", "evidence", "population", "truth", "camera",
	"energy", "method", "garden", "river", "summer", "winter", "island", "forest", "engine", "letter", "bridge", "train", "stone", "glass", "answer", "color",
	"metal", "cloud", "ocean", "bread", "apple", "horse", "dream", "chair", "plant", "sound", "signal", "memory", "screen", "coffee", "bottle", "ticket",
	"pocket", "button", "circle", "square", "corner", "valley", "desert", "planet", "rocket", "album", "anchor", "autumn", "basket", "battery", "blanket", "candle",
}

// appendPromptText appends the text rendering of a token-id prompt: one word
// per id, separated by spaces.
func appendPromptText(b []byte, tokens []int32) []byte {
	for i, t := range tokens {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, promptWords[uint32(t)%uint32(len(promptWords))]...)
	}
	return b
}

// appendChatBody appends the /v1/chat/completions request body for a text
// prompt, without reflection:
//
//	{"model":M,"messages":[{"role":"user","content":T}],"max_tokens":O,
//	 "min_tokens":O,"ignore_eos":true,"stream":true,
//	 "stream_options":{"include_usage":true}}
//
// (with t's options in place of min_tokens and ignore_eos, see
// appendLengthTail). max_tokens (not max_completion_tokens) because vLLM
// and older servers accept it; vLLM honours min_tokens and ignore_eos on
// chat as on completions.
func appendChatBody(b []byte, model, text string, output int, t *bodyTail) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"messages":[{"role":"user","content":`...)
	b = appendJSONString(b, text)
	b = append(b, `}],"max_tokens":`...)
	return appendLengthTail(b, output, t)
}

// appendCompletionTextBody is appendCompletionBody for a text prompt.
func appendCompletionTextBody(b []byte, model, text string, output int, t *bodyTail) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"prompt":`...)
	b = appendJSONString(b, text)
	b = append(b, `,"max_tokens":`...)
	return appendLengthTail(b, output, t)
}
