package bench

import (
	"math"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, math.NaN(), 1, 3}, 3},
	} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5, 0} // 0..10
	for _, tc := range []struct{ p, want float64 }{
		{0, 0}, {10, 1}, {50, 5}, {90, 9}, {100, 10}, {25, 2.5}, {95, 9.5},
	} {
		if got := Percentile(xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Percentile(0..10, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	// Interpolation between ranks with few values.
	if got := Percentile([]float64{1, 2, 3, 4, 5}, 10); math.Abs(got-1.4) > 1e-9 {
		t.Errorf("Percentile(1..5, 10) = %v, want 1.4", got)
	}
	for _, p := range []float64{-1, 101, math.NaN()} {
		if got := Percentile(xs, p); !math.IsNaN(got) {
			t.Errorf("Percentile(xs, %v) = %v, want NaN", p, got)
		}
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3}
	s := Summarize(in)
	want := Summary{N: 5, Min: 1, P10: 1.4, Median: 3, P90: 4.6, Max: 5}
	if math.Abs(s.P10-want.P10) > 1e-9 || math.Abs(s.P90-want.P90) > 1e-9 {
		t.Errorf("Summarize p10/p90 = %v/%v, want %v/%v", s.P10, s.P90, want.P10, want.P90)
	}
	s.P10, s.P90 = want.P10, want.P90
	if s != want {
		t.Errorf("Summarize(%v) = %+v, want %+v", in, s, want)
	}
	if in[0] != 5 {
		t.Errorf("Summarize modified its input: %v", in)
	}
	if got := Summarize([]float64{math.NaN()}); got.N != 0 {
		t.Errorf("Summarize(NaN) = %+v, want N = 0", got)
	}
	if got, want := s.Spread(1), "3.0 [1.0–5.0]"; got != want {
		t.Errorf("Spread = %q, want %q", got, want)
	}
	if got := (Summary{}).Spread(1); got != "n/a" {
		t.Errorf("empty Spread = %q, want n/a", got)
	}
}

func TestRatioAndSeconds(t *testing.T) {
	if got := Ratio(10, 4); got != 2.5 {
		t.Errorf("Ratio(10, 4) = %v", got)
	}
	if got := Ratio(1, 0); !math.IsNaN(got) {
		t.Errorf("Ratio(1, 0) = %v, want NaN", got)
	}
	if got := Format(math.NaN(), 2); got != "n/a" {
		t.Errorf("Format(NaN) = %q", got)
	}
	if got := Seconds([]time.Duration{1500 * time.Millisecond}); got[0] != 1.5 {
		t.Errorf("Seconds = %v", got)
	}
}
