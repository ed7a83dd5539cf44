//go:build !(amd64 || arm64)

package probes

// scanTemplate needs unaligned little-endian loads; elsewhere scanFast
// does all the work.
func (p *stepParser) scanTemplate(b []byte, rec *StepRecord, tsSet *bool) bool { return false }
