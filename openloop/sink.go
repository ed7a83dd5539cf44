package openloop

import (
	"io"
	"sync"
	"time"
)

// sinkEvery is how often the record sink takes the records handed to it.
const sinkEvery = 10 * time.Millisecond

// sinkKick is the number of waiting records that makes the sink take them
// at once rather than at its next tick.
const sinkKick = 1024

// recordSink collects the run's records and streams them to Config.Sink,
// one Write per line. A finished request hands its record over under a lock
// and wakes nobody; one goroutine takes what has gathered every sinkEvery
// (a channel send per record woke that goroutine, and a thread, for every
// request). Records reach the writer within about sinkEvery of their end.
type recordSink struct {
	w     io.Writer   // nil: keep the records only
	onErr func(error) // the first Write error

	mu      sync.Mutex
	pending []Record
	closed  bool

	kick    chan struct{} // buffered 1
	done    chan struct{}
	records []Record // every record, in the order they came; read after close
}

// newRecordSink starts a sink writing to w (may be nil), with room for
// expect records.
func newRecordSink(w io.Writer, expect int, onErr func(error)) *recordSink {
	s := &recordSink{w: w, onErr: onErr, kick: make(chan struct{}, 1), done: make(chan struct{}),
		records: make([]Record, 0, expect)}
	go s.loop()
	return s
}

// add hands rec over.
func (s *recordSink) add(rec *Record) {
	s.mu.Lock()
	s.pending = append(s.pending, *rec)
	many := len(s.pending) >= sinkKick
	s.mu.Unlock()
	if many {
		s.wake()
	}
}

func (s *recordSink) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// close takes the last records and returns them all; add must not be
// called after it.
func (s *recordSink) close() []Record {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
	<-s.done
	return s.records
}

func (s *recordSink) loop() {
	defer close(s.done)
	t := time.NewTicker(sinkEvery)
	defer t.Stop()
	buf := make([]byte, 0, 4096)
	var batch []Record
	var werr error
	for {
		select {
		case <-t.C:
		case <-s.kick:
		}
		s.mu.Lock()
		batch, s.pending = s.pending, batch[:0]
		closed := s.closed
		s.mu.Unlock()
		s.records = append(s.records, batch...)
		if s.w != nil && werr == nil {
			for i := range batch {
				buf = append(batch[i].AppendJSON(buf[:0]), '\n')
				if _, werr = s.w.Write(buf); werr != nil {
					s.onErr(werr)
					break
				}
			}
		}
		clear(batch) // drop the references to the records' slices
		if closed {
			return
		}
	}
}
