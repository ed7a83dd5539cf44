package openloop

import "testing"

func TestRedactUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:PASS@host:8000":                 "http://user:***@host:8000",
		"https://tok3n@api.example/v1":               "https://***@api.example/v1",
		`Post "http://u:p%40ss@h/v1": dial tcp`:      `Post "http://u:***@h/v1": dial tcp`,
		"http://host:8000/v1?q=a@b":                  "http://host:8000/v1?q=a@b",
		"mail a@b.c, http://x:y@h and http://z:w@h2": "mail a@b.c, http://x:***@h and http://z:***@h2",
		"http://127.0.0.1:8000":                      "http://127.0.0.1:8000",
		"http://user:@host":                          "http://user:***@host",
	} {
		if got := RedactUserinfo(in); got != want {
			t.Errorf("RedactUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
