// Package stats holds the summary statistics of the benchmark harness: the percentiles the
// measurements record and the medians the report takes over repeats. One copy, so the two
// cannot drift apart.
package stats

import (
	"math"
	"slices"
)

// Percentile returns the q-th percentile (0 < q <= 100) of sorted values by
// the nearest-rank method: the smallest value with at least q% of the
// samples at or below it. It returns 0 for no samples.
func Percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or NaN for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
