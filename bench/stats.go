// Package bench holds the statistics helpers of the benchmark program
// (bench/cmd/bench). They are kept apart from the program so they can be
// tested without starting any server.
package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes repeated measurements of one quantity. Benchmarks on a
// shared machine are noisy, so the median is the figure reported, and the
// spread (min/max, p10/p90) says how much to trust it.
type Summary struct {
	N                          int
	Min, P10, Median, P90, Max float64
}

// Summarize returns the summary of xs. It does not modify xs. An empty xs
// gives a zero Summary with N = 0; NaN values are ignored, so a repetition
// that produced no figure can be recorded as NaN.
func Summarize(xs []float64) Summary {
	s := sortedFinite(xs)
	if len(s) == 0 {
		return Summary{}
	}
	return Summary{
		N:      len(s),
		Min:    s[0],
		P10:    percentileSorted(s, 10),
		Median: percentileSorted(s, 50),
		P90:    percentileSorted(s, 90),
		Max:    s[len(s)-1],
	}
}

// Median returns the median of xs (the mean of the two middle values for an
// even count), or NaN when xs holds no number.
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Percentile returns the p-th percentile (0 <= p <= 100) of xs by linear
// interpolation between closest ranks (the method of NumPy's default and
// of spreadsheets' PERCENTILE.INC), or NaN when xs holds no number. With
// few repetitions p10/p90 are interpolations, not observed values; Min and
// Max are.
func Percentile(xs []float64, p float64) float64 {
	s := sortedFinite(xs)
	if len(s) == 0 || p < 0 || p > 100 || math.IsNaN(p) {
		return math.NaN()
	}
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	frac := rank - float64(lo)
	return s[lo] + frac*(s[lo+1]-s[lo])
}

func sortedFinite(xs []float64) []float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	slices.Sort(s)
	return s
}

// Seconds converts durations to seconds, the unit of the report's tables.
func Seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// Ratio returns a/b, or NaN when b is zero, so a missing baseline shows as
// "n/a" rather than as infinity.
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// Format prints x with the given number of decimals, and "n/a" for NaN.
func Format(x float64, decimals int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", decimals, x)
}

// Spread prints a summary as "median [min–max]" with the given decimals.
func (s Summary) Spread(decimals int) string {
	if s.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s [%s–%s]", Format(s.Median, decimals), Format(s.Min, decimals), Format(s.Max, decimals))
}
