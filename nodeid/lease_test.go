package nodeid_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

func TestLeaseRoundTrip(t *testing.T) {
	in := nodeid.Lease{
		TaskID:        "arn:aws:ecs:eu-west-1:1:task/c/abc",
		Instance:      nodeid.NodeInstance{ID: 2, Version: 7},
		Expires:       time.UnixMilli(1764504000123),
		Duration:      15 * time.Second,
		Nonce:         "00ff",
		KnownVersions: nodeid.VersionMappings{0: 3, 2: 7},
		Acquirable:    true,
	}
	body, meta := in.Encode()
	if meta["taskid"] != in.TaskID || meta["version"] != "7" || meta["acquirable"] != "true" ||
		meta["nonce"] != "00ff" || meta["leaseduration"] != "15000" {
		t.Fatalf("metadata %v", meta)
	}
	// Camunda's parser rejects any field it does not know: the body has
	// exactly its four, and what only we need is in metadata and whitespace.
	var generic map[string]any
	if err := json.Unmarshal(body, &generic); err != nil {
		t.Fatal(err)
	}
	if len(generic) != 4 {
		t.Errorf("body has %d fields, want Camunda's 4: %s", len(generic), body)
	}
	for _, field := range []string{"taskId", "timestamp", "nodeInstance", "knownVersionMappings"} {
		if _, ok := generic[field]; !ok {
			t.Errorf("body lacks %q: %s", field, body)
		}
	}
	if strings.Contains(string(body), "00ff") {
		t.Errorf("nonce written as text in the body: %s", body)
	}
	if !strings.Contains(string(body), `"mappingsByNodeId":{"0":3,"2":7}`) {
		t.Errorf("mappings not in Camunda's wire form: %s", body)
	}
	out, err := nodeid.DecodeLease(2, body, meta)
	if err != nil {
		t.Fatal(err)
	}
	if out.TaskID != in.TaskID || out.Instance != in.Instance || !out.Expires.Equal(in.Expires) ||
		out.Duration != in.Duration || out.Nonce != in.Nonce || !out.Acquirable ||
		len(out.KnownVersions) != 2 || out.KnownVersions[0] != 3 {
		t.Fatalf("round trip: %+v", out)
	}
}

func TestReleasedLeaseHasAUniquePaddedBodyKeepingTheVersion(t *testing.T) {
	rel := nodeid.Lease{Writer: "t1", Instance: nodeid.NodeInstance{ID: 4, Version: 9}, Nonce: "n1", Acquirable: true}
	body, meta := rel.Encode()
	if len(body) == 0 || len(body)%512 != 0 || meta["taskid"] != "" || meta["version"] != "9" || meta["acquirable"] != "true" {
		t.Fatalf("released lease encodes as %q %v", body, meta)
	}
	// Camunda reads the JSON literal null as "no lease": released.
	if strings.TrimSpace(string(body)) != "null" {
		t.Fatalf("released body is %q, want null and whitespace", body)
	}
	rel.Nonce = "n2"
	if other, _ := rel.Encode(); string(other) == string(body) {
		t.Fatal("two releases of one version with different nonces have the same body, so the same ETag")
	}
	l, err := nodeid.DecodeLease(4, body, map[string]string{"Taskid": "", "Version": "9", "Writer": "t1"}) // any key case; acquirable missing = true
	if err != nil || l.Held() || l.Legacy || l.Writer != "t1" || l.Instance.Version != 9 || !l.Acquirable || l.Nonce != "n1" {
		t.Fatalf("decoded %+v, %v", l, err)
	}
}

func TestHeldBodyIsNeverSizedLikeAReleasedOne(t *testing.T) {
	for n := 0; n < 600; n++ {
		l := nodeid.Lease{TaskID: strings.Repeat("t", n+1), Instance: nodeid.NodeInstance{ID: 1, Version: 1}, Nonce: "ab", Acquirable: true}
		body, meta := l.Encode()
		if len(body)%512 == 0 {
			t.Fatalf("held body of %d bytes looks released to a listing", len(body))
		}
		if _, err := nodeid.DecodeLease(1, body, meta); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmptyBodyIsALegacyReleasedLease(t *testing.T) {
	l, err := nodeid.DecodeLease(4, nil, map[string]string{"taskid": "", "version": "9"})
	if err != nil || l.Held() || !l.Legacy || l.Instance.Version != 9 || !l.Acquirable {
		t.Fatalf("decoded %+v, %v", l, err)
	}
}

func TestDecodeLeaseRejectsWhatIsNotALease(t *testing.T) {
	good := `{"taskId":"t","timestamp":1,"nodeInstance":{"id":1,"version":2},"knownVersionMappings":{"mappingsByNodeId":{}}}`
	meta := func(kv ...string) map[string]string {
		m := map[string]string{"taskid": "t", "version": "2", "acquirable": "true"}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "<delete>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	if _, err := nodeid.DecodeLease(1, []byte(good), meta()); err != nil {
		t.Fatalf("good lease rejected: %v", err)
	}
	cases := []struct {
		name string
		body string
		meta map[string]string
	}{
		{"truncated json", good[:30], meta()},
		{"not json", "hello", meta()},
		{"trailing data", good + `{}`, meta()},
		{"unknown field", strings.Replace(good, `"taskId"`, `"owner":"x","taskId"`, 1), meta()},
		{"no taskId", strings.Replace(good, `"taskId":"t",`, "", 1), meta()},
		{"empty taskId", strings.Replace(good, `"taskId":"t"`, `"taskId":""`, 1), meta()},
		{"no timestamp", strings.Replace(good, `"timestamp":1,`, "", 1), meta()},
		{"no nodeInstance", `{"taskId":"t","timestamp":1}`, meta()},
		{"id of another node", strings.Replace(good, `"id":1`, `"id":3`, 1), meta()},
		{"version 0 held", strings.Replace(good, `"version":2`, `"version":0`, 1), meta("version", "0")},
		{"body and metadata versions differ", good, meta("version", "5")},
		{"body and metadata tasks differ", good, meta("taskid", "u")},
		{"version metadata missing", good, meta("version", "<delete>")},
		{"version metadata not a number", good, meta("version", "two")},
		{"negative version metadata", "", map[string]string{"version": "-1"}},
		{"acquirable not a boolean", good, meta("acquirable", "maybe")},
		{"empty body with a task", "", meta("version", "2")},
		{"string version", strings.Replace(good, `"version":2`, `"version":"2"`, 1), meta()},
		{"negative mapping", strings.Replace(good, `{}}`, `{"0":-1}}`, 1), meta()},
		{"bad mapping key", strings.Replace(good, `{}}`, `{"01":1}}`, 1), meta()},
		{"huge body", `{"taskId":"` + strings.Repeat("x", nodeid.MaxLeaseBodySize) + `"}`, meta()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := nodeid.DecodeLease(1, []byte(c.body), c.meta)
			if !errors.Is(err, nodeid.ErrCorruptLease) {
				t.Fatalf("got %v, want ErrCorruptLease", err)
			}
		})
	}
}

func TestLeaseKeys(t *testing.T) {
	if k := nodeid.LeaseKey("a/b/", 12); k != "a/b/12.json" {
		t.Fatalf("LeaseKey = %q", k)
	}
	for key, want := range map[string]int{"p/0.json": 0, "p/12.json": 12} {
		if id, ok := nodeid.ParseLeaseKey("p/", key); !ok || id != want {
			t.Errorf("ParseLeaseKey(%q) = %d, %v", key, id, ok)
		}
	}
	for _, key := range []string{"p/012.json", "p/-1.json", "p/1.JSON", "p/x.json", "q/1.json", "p/sub/1.json",
		"p/nodeid-probe.json", "p/nodeid-probe-3.json", "p/1.json.bak", "p/.json", "p/+1.json", "p/99999999999.json"} {
		if id, ok := nodeid.ParseLeaseKey("p/", key); ok {
			t.Errorf("ParseLeaseKey(%q) = %d, want not a lease key", key, id)
		}
	}
}

func TestVersionMappingsOnlyGrow(t *testing.T) {
	m := nodeid.VersionMappings{}
	m.Observe(1, 5)
	m.Observe(1, 3)
	m.Observe(2, 1)
	if m[1] != 5 || m[2] != 1 {
		t.Fatalf("%v", m)
	}
	c := m.Clone()
	c.Observe(1, 9)
	if m[1] != 5 {
		t.Fatal("Clone shares storage")
	}
}

func TestExpiredByServerClock(t *testing.T) {
	lm := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	L := 15 * time.Second
	cases := []struct {
		date time.Time
		want bool
	}{
		{lm.Add(L), false},                        // r - s could be just under L
		{lm.Add(L + 999*time.Millisecond), false}, // still within the granularity
		{lm.Add(L + time.Second), true},
		{lm.Add(-time.Hour), false}, // server clocks disagree: never expired
		{time.Time{}, false},        // no Date header: no judgement
	}
	for _, c := range cases {
		if got := nodeid.ExpiredByServerClock(lm, c.date, L); got != c.want {
			t.Errorf("Date-LM = %v: got %v, want %v", c.date.Sub(lm), got, c.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	valid := func() nodeid.Config {
		return nodeid.Config{TaskID: "t", ClusterSize: 3}
	}
	if _, err := nodeid.NewProvider(nil, valid()); !errors.Is(err, nodeid.ErrInvalidConfig) {
		t.Fatalf("nil repository: %v", err)
	}
	cases := map[string]func(*nodeid.Config){
		"empty task id":           func(c *nodeid.Config) { c.TaskID = "" },
		"task id with a space":    func(c *nodeid.Config) { c.TaskID = "a b" },
		"task id not ascii":       func(c *nodeid.Config) { c.TaskID = "tâche" },
		"cluster size 0":          func(c *nodeid.Config) { c.ClusterSize = 0 },
		"negative cluster size":   func(c *nodeid.Config) { c.ClusterSize = -2 },
		"allowed id out of range": func(c *nodeid.Config) { c.AllowedIDs = []int{3} },
		"allowed id twice":        func(c *nodeid.Config) { c.AllowedIDs = []int{1, 1} },
		"negative lease":          func(c *nodeid.Config) { c.LeaseDuration = -time.Second },
		"lease below two server ticks": func(c *nodeid.Config) {
			c.LeaseDuration, c.RenewInterval, c.SafetyMargin, c.RequestTimeout = 1500*time.Millisecond, 400*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
		},
		"margin below L/20":           func(c *nodeid.Config) { c.SafetyMargin = 700 * time.Millisecond },
		"margin below 100ms":          func(c *nodeid.Config) { c.LeaseDuration, c.SafetyMargin = 2*time.Second, 50*time.Millisecond },
		"renew interval too long":     func(c *nodeid.Config) { c.RenewInterval = 7 * time.Second },
		"margin as long as the lease": func(c *nodeid.Config) { c.SafetyMargin = 15 * time.Second },
		"request timeout >= renew":    func(c *nodeid.Config) { c.RequestTimeout = 5 * time.Second },
		"negative acquire timeout":    func(c *nodeid.Config) { c.AcquireTimeout = -1 },
		"negative poll interval":      func(c *nodeid.Config) { c.PollInterval = -1 },
		"negative readiness timeout":  func(c *nodeid.Config) { c.ReadinessTimeout = -1 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := valid()
			mutate(&c)
			_, err := nodeid.NewProvider(fakeRepoForValidation{}, c)
			if !errors.Is(err, nodeid.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
		})
	}
	p, err := nodeid.NewProvider(fakeRepoForValidation{}, valid())
	if err != nil {
		t.Fatal(err)
	}
	got := p.Config()
	if got.LeaseDuration != 15*time.Second || got.RenewInterval != 5*time.Second || got.SafetyMargin != 3*time.Second || got.RequestTimeout != 2500*time.Millisecond {
		t.Errorf("defaults: L=%v R=%v m=%v T=%v", got.LeaseDuration, got.RenewInterval, got.SafetyMargin, got.RequestTimeout)
	}
}

func TestBucketAndPrefixValidation(t *testing.T) {
	for _, b := range []string{"", "ab", "Upper", "-lead", "trail-", "under_score", strings.Repeat("a", 64)} {
		if nodeid.ValidateBucket(b) == nil {
			t.Errorf("bucket %q accepted", b)
		}
	}
	for _, b := range []string{"abc", "my-bucket.v2", "0leases"} {
		if err := nodeid.ValidateBucket(b); err != nil {
			t.Errorf("bucket %q rejected: %v", b, err)
		}
	}
	for _, p := range []string{"/abs/", "tab\t/", strings.Repeat("p", 513)} {
		if nodeid.ValidatePrefix(p) == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

// fakeRepoForValidation is never called: NewProvider must not touch storage.
type fakeRepoForValidation struct{ nodeid.Repository }

// Schedule: someone writes a lease whose knownVersionMappings name an
// absurd version (MaxInt64) for node 0. The next taker computed 1 +
// MaxInt64, which wrapped to a negative version. Versions above
// nodeid.MaxVersion now make the object corrupt: it is skipped, never taken.
func TestHugeKnownVersionIsCorruptNotWrapped(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	if err := nodeid.Initialize(context.Background(), direct, 1, "bootstrap", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"taskId":"someone","timestamp":%d,"nodeInstance":{"id":0,"version":5},"knownVersionMappings":{"mappingsByNodeId":{"0":%d}},"nonce":"x"}`,
		time.Now().UnixMilli(), int64(math.MaxInt64))
	for len(body)%512 != 0 {
		body += " "
	}
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), body, map[string]string{"taskid": "", "version": "5", "acquirable": "true"})
	if _, err := direct.Get(context.Background(), 0); !errors.Is(err, nodeid.ErrCorruptLease) {
		t.Fatalf("a mapping of version MaxInt64 reads as %v, want ErrCorruptLease", err)
	}

	cfg := fastConfig(t, "task", 1, nil)
	cfg.AcquireTimeout = 500 * time.Millisecond
	p := newProvider(t, direct, cfg)
	inst, err := p.Acquire(context.Background())
	if !errors.Is(err, nodeid.ErrAcquireTimeout) {
		t.Fatalf("took %v (err %v) from a corrupt object", inst, err)
	}
}
