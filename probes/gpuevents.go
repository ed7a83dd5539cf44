package probes

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUEventKind names a hardware event NVML reports.
type GPUEventKind string

// The hardware events a run records.
const (
	EventXid          GPUEventKind = "xid"            // critical XID error; Data is the XID number
	EventECCSingleBit GPUEventKind = "ecc_single_bit" // corrected memory error
	EventECCDoubleBit GPUEventKind = "ecc_double_bit" // uncorrected memory error
)

// GPUEvent is one hardware event, attached to the sample of its GPU taken
// in the round that read it.
type GPUEvent struct {
	TsUs int64        `json:"ts_us"`
	Kind GPUEventKind `json:"kind"`
	Data uint64       `json:"data,omitempty"` // the XID number for xid
}

// watchedEvents are the event types the sampler registers, where supported.
const watchedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError

// eventKinds names each watched event type.
var eventKinds = map[uint64]GPUEventKind{
	nvml.EventTypeXidCriticalError:  EventXid,
	nvml.EventTypeSingleBitEccError: EventECCSingleBit,
	nvml.EventTypeDoubleBitEccError: EventECCDoubleBit,
}

// eventWatch is an NVML event set with the sampler's GPUs registered.
type eventWatch struct {
	set    nvml.EventSet
	byUUID map[string]int // device UUID → index in Sampler.devs
}

// openEvents creates an event set and registers each GPU for the watched
// events it supports. It returns nil (events off) with the reason when
// nothing could be registered; GPUs that refused are named in the note.
func openEvents(lib nvml.Interface, devs []gpuDev) (*eventWatch, string) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, "event set: " + returnName(ret)
	}
	w := &eventWatch{set: set, byUUID: map[string]int{}}
	var note string
	for i, g := range devs {
		sup, ret := g.dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			note += fmt.Sprintf("gpu%d: supported events: %s; ", g.index, returnName(ret))
			continue
		}
		if want := sup & watchedEvents; want != 0 {
			if ret := g.dev.RegisterEvents(want, set); ret != nvml.SUCCESS {
				note += fmt.Sprintf("gpu%d: register events: %s; ", g.index, returnName(ret))
				continue
			}
			w.byUUID[g.uuid] = i
		}
	}
	if len(w.byUUID) == 0 {
		set.Free()
		return nil, note + "no GPU registered for XID/ECC events"
	}
	return w, note
}

// drain reads every pending event without waiting and adds each to the
// sample of its GPU (out is indexed like Sampler.devs).
func (w *eventWatch) drain(out []GPUSample, ts int64) {
	for range 1024 { // bounded: an event storm cannot hold the round
		e, ret := w.set.Wait(0)
		if ret != nvml.SUCCESS {
			return // ERROR_TIMEOUT: none pending
		}
		kind, ok := eventKinds[e.EventType]
		if !ok || e.Device == nil {
			continue
		}
		uuid, _ := e.Device.GetUUID()
		if i, ok := w.byUUID[uuid]; ok && i < len(out) {
			out[i].Events = append(out[i].Events, GPUEvent{TsUs: ts, Kind: kind, Data: e.EventData})
		}
	}
}

func (w *eventWatch) close() {
	if w != nil {
		w.set.Free()
	}
}
