package openloop

// Validate reports the first setting of c that cannot be run, its message
// starting with the setting's path as the matrix names it ("rate: …",
// "arrival: ramp: from: …", `shape "s": input: …`), so that a caller can
// name the setting in its own terms (mbench load names the flag). Run
// calls it first.
func (c *Config) Validate() error { return c.validate() }
