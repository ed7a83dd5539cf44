package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
)

// Per-block allocations (hosts.<name>.slurm.allocation: block): when a
// block ends its engines stop and the allocations of those hosts are
// cancelled; the next block asks Slurm for new ones, prepares the hosts
// again and measures the GPU gate's idle baseline on the new nodes. Each
// run's journal line names the job and node it ran on.

// perBlockHosts lists the slurm hosts of the matrix that ask for an
// allocation per block.
func (f *fleet) perBlockHosts() []string {
	return slices.DeleteFunc(slices.Clone(f.m.HostOrder), func(name string) bool {
		hc := f.m.Hosts[name]
		return !hc.IsSlurm() || hc.Slurm.Allocation != matrices.AllocationBlock
	})
}

// endBlockAllocations stops the running engines and ends the allocation of
// every connected per-block host, after a block: COMPLETED, as the block is.
// ended reports whether it ended any: the next block then renews them.
func (s *sweep) endBlockAllocations(ctx context.Context, block int) (ended bool, err error) {
	names := slices.DeleteFunc(s.fleet.perBlockHosts(), func(name string) bool {
		_, ok := s.fleet.connected(name)
		return !ok
	})
	if len(names) == 0 {
		return false, nil
	}
	err = s.engines.stop(ctx)
	for _, name := range names {
		// The block is done: its job ends COMPLETED (or, should that fail,
		// cancelled as the host closes).
		if h, ok := s.fleet.connected(name); ok {
			if nh, ok := h.(hosts.NodeHost); ok && err == nil {
				if cerr := nh.Complete(ctx); cerr != nil {
					s.logf("warning: host %s: complete slurm job %s: %v (it is cancelled instead)", name, nh.Allocation().JobID, cerr)
				}
			}
		}
		s.fleet.drop(name)
	}
	s.logf("block %d done: slurm allocation of %s ended (allocation: block)", block, strings.Join(names, ", "))
	return true, err
}

// renewAllocations, before a block, gets new allocations for the hosts
// whose allocations the previous block ended, and re-measures the gate's
// idle baseline on their nodes.
func (s *sweep) renewAllocations(ctx context.Context) error {
	if err := s.fleet.prepare(ctx); err != nil {
		return fmt.Errorf("new slurm allocation for the block: %w", err)
	}
	s.instr.close()
	s.instr.open(ctx)
	return nil
}
