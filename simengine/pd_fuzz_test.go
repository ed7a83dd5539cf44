package simengine

import (
	"errors"
	"testing"
)

// FuzzKVTransferParams: any kv_transfer_params is accepted or refused with a
// 400, for every role, never a panic.
func FuzzKVTransferParams(f *testing.F) {
	for _, s := range []string{`{"do_remote_decode": true}`, `{"do_remote_prefill": true, "remote_engine_id": "e", "remote_host": "h", "remote_port": 1}`,
		`null`, `{}`, `[]`, `{"remote_block_ids": [1, "x"]}`, `{"do_remote_decode": 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, role := range []string{KVRoleNone, KVRoleProducer, KVRoleConsumer, KVRoleBoth} {
			p, err := decodeKVTransfer(raw, role, "")
			var ae *apiError
			if err != nil && (!errors.As(err, &ae) || ae.status != 400) {
				t.Fatalf("%s (%q): %v is not a 400", raw, role, err)
			}
			if err == nil && p != nil && p.DoRemoteDecode && p.DoRemotePrefill {
				t.Fatalf("%s (%q): both directions accepted", raw, role)
			}
		}
	})
}
