package plan

import (
	"fmt"
	"math"
)

// Design is sweep.json's account of how the block orders were made
// and how close the blocks planned so far come to balance.
type Design struct {
	Kind    string  `json:"kind"`   // DesignWilliams, or "fixed" (randomize: false)
	Cells   int     `json:"cells"`  // cells of a full block
	Period  int     `json:"period"` // blocks of one whole Williams square
	Balance Balance `json:"balance"`
}

// Balance measures the planned block orders against a perfectly
// counterbalanced design.
type Balance struct {
	Blocks int `json:"blocks"`
	// PositionMaxDev is the largest distance, in positions, between a cell's
	// mean position over its blocks and the middle of the block (0: every
	// cell sits in the middle on average, so a linear drift within the
	// blocks cancels out of every comparison).
	PositionMaxDev float64 `json:"position_max_deviation"`
	// PairOrderMaxDev is the largest |#(a before b) − #(b before a)| over
	// pairs of cells that ran in a block together (0: every pair ran in
	// both orders equally often).
	PairOrderMaxDev int `json:"pair_order_max_imbalance"`
	// CarryoverSeen of CarryoverPairs ordered (previous, next) neighbour
	// pairs occurred; a whole Williams square has each exactly once.
	CarryoverSeen  int    `json:"carryover_pairs_seen"`
	CarryoverPairs int    `json:"carryover_pairs"`
	Balanced       bool   `json:"balanced"` // positions and pair orders exactly balanced
	Words          string `json:"words"`
}

// MeasureBalance computes the balance of block orders (each a list of cell
// ids; blocks may run a subset of the n cells).
func MeasureBalance(orders [][]string, n int) Balance {
	bal := Balance{Blocks: len(orders), CarryoverPairs: n * (n - 1)}
	posDev := map[string]float64{}
	posN := map[string]int{}
	before := map[[2]string]int{}
	neighbours := map[[2]string]bool{}
	for _, o := range orders {
		mid := float64(len(o)-1) / 2
		for i, a := range o {
			posDev[a] += float64(i) - mid
			posN[a]++
			for _, b := range o[i+1:] {
				if a < b {
					before[[2]string{a, b}]++
				} else {
					before[[2]string{b, a}]--
				}
			}
			if i > 0 {
				neighbours[[2]string{o[i-1], a}] = true
			}
		}
	}
	for c, d := range posDev {
		bal.PositionMaxDev = math.Max(bal.PositionMaxDev, math.Abs(d/float64(posN[c])))
	}
	for _, d := range before {
		bal.PairOrderMaxDev = max(bal.PairOrderMaxDev, d, -d) // |d|
	}
	bal.CarryoverSeen = len(neighbours)
	bal.Balanced = bal.PositionMaxDev < 1e-9 && bal.PairOrderMaxDev == 0
	switch {
	case len(orders) == 0:
		bal.Words = "no blocks planned"
	case bal.Balanced:
		bal.Words = fmt.Sprintf("balanced: after %d blocks every cell's mean position is the middle of the block and every pair of cells ran in both orders equally often; %d of the %d ordered neighbour pairs occurred",
			len(orders), bal.CarryoverSeen, bal.CarryoverPairs)
	default:
		bal.Words = fmt.Sprintf("not balanced after %d blocks: a cell's mean position is up to %.1f positions from the middle and a pair of cells ran in one order up to %d more times than in the other (an odd number of blocks cannot balance); %d of the %d ordered neighbour pairs occurred",
			len(orders), bal.PositionMaxDev, bal.PairOrderMaxDev, bal.CarryoverSeen, bal.CarryoverPairs)
	}
	return bal
}

// DesignOf describes the design of a sweep of n cells with the given
// blocks.
func DesignOf(n int, randomize bool, blocks []Block) *Design {
	d := &Design{Kind: DesignWilliams, Cells: n, Period: WilliamsPeriod(n)}
	if !randomize {
		d.Kind, d.Period = "fixed", 1
	}
	orders := make([][]string, len(blocks))
	for i, b := range blocks {
		orders[i] = b.Order
	}
	d.Balance = MeasureBalance(orders, n)
	return d
}
