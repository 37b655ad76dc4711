package nodeid_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/nodeid"
)

// Every lease object this tool writes must be read correctly by Camunda 8.9's
// provider (its strict parser, modelled in internal/camunda and checked with
// the real Jackson): held leases as held by the same task at the same version
// and expiry, everything else as free to take, at the version kept.
func TestEveryLeaseWeWriteReadsCorrectlyUnderCamundasRules(t *testing.T) {
	expires := time.UnixMilli(1764504000123)
	cases := []struct {
		name  string
		lease nodeid.Lease
		want  string // Stored.String() of Camunda's view
	}{
		{"held", nodeid.Lease{TaskID: "arn:aws:ecs:eu-west-1:1:task/c/abc", Instance: nodeid.NodeInstance{ID: 2, Version: 7}, Expires: expires,
			Duration: 15 * time.Second, Nonce: "0123456789abcdef0123456789abcdef", KnownVersions: nodeid.VersionMappings{0: 3, 2: 7}, Acquirable: true},
			`Initialized task="arn:aws:ecs:eu-west-1:1:task/c/abc" node=2 v7 ts=1764504000123 acquirable=true known={0:3,2:7}`},
		{"held, no known versions", nodeid.Lease{TaskID: "t", Instance: nodeid.NodeInstance{ID: 0, Version: 1}, Expires: expires, Nonce: "ff", Acquirable: true},
			`Initialized task="t" node=0 v1 ts=1764504000123 acquirable=true known={}`},
		{"recreated after a delete", nodeid.Lease{TaskID: "recreated-by:t", Instance: nodeid.NodeInstance{ID: 3, Version: 4}, Expires: expires, Duration: time.Minute, Nonce: "aa", Acquirable: true},
			`Initialized task="recreated-by:t" node=3 v4 ts=1764504000123 acquirable=true known={}`},
		{"released", nodeid.Lease{Writer: "t", Instance: nodeid.NodeInstance{ID: 2, Version: 7}, Nonce: "0123456789abcdef0123456789abcdef", Acquirable: true, Duration: 15 * time.Second},
			`Uninitialized v7 acquirable=true`},
		{"never held (our bootstrap)", nodeid.Lease{Writer: "t", Instance: nodeid.NodeInstance{ID: 5}, Nonce: "0123456789abcdef0123456789abcdef", Acquirable: true},
			`Uninitialized v0 acquirable=true`},
		{"forced release", nodeid.Lease{Writer: "operator", Instance: nodeid.NodeInstance{ID: 1, Version: 9}, Nonce: "bb", Acquirable: true, Forced: true},
			`Uninitialized v9 acquirable=true`},
		{"scaled down", nodeid.Lease{Writer: "admin", Instance: nodeid.NodeInstance{ID: 6, Version: 2}, Nonce: "cc", Acquirable: false},
			`Uninitialized v2 acquirable=false`},
	}
	var objs []camunda.Object
	for _, c := range cases {
		body, meta := c.lease.Encode()
		got, err := camunda.ReadLease(body, meta)
		if err != nil {
			t.Errorf("%s: Camunda cannot read %q %v: %v", c.name, body, meta, err)
			continue
		}
		if got.String() != c.want {
			t.Errorf("%s: Camunda reads\n  %s\nwant\n  %s", c.name, got, c.want)
		}
		// And we read back what we wrote.
		back, err := nodeid.DecodeLease(c.lease.Instance.ID, body, meta)
		if err != nil || back.Nonce != c.lease.Nonce || back.Duration != c.lease.Duration || back.Held() != c.lease.Held() ||
			back.Instance != c.lease.Instance || back.Forced != c.lease.Forced || back.Acquirable != c.lease.Acquirable {
			t.Errorf("%s: read back %+v, %v", c.name, back, err)
		}
		objs = append(objs, camunda.LeaseObject(body, meta))
	}
	for i, line := range camunda.JacksonCheck(t, objs...) {
		if line != cases[i].want {
			t.Errorf("%s: Jackson reads\n  %s\nwant\n  %s", cases[i].name, line, cases[i].want)
		}
	}
}

// Two writes that differ only in their nonce must differ in body (S3's ETag
// is the MD5 of the body, not of the metadata), for every kind of lease.
func TestNonceMakesEveryBodyDistinct(t *testing.T) {
	for _, held := range []bool{true, false} {
		seen := map[string]string{}
		for i := 0; i < 200; i++ {
			l := nodeid.Lease{Instance: nodeid.NodeInstance{ID: 1, Version: 3}, Expires: time.UnixMilli(1), Nonce: fmt.Sprintf("%032x", i), Acquirable: true}
			if held {
				l.TaskID = "t"
			}
			body, _ := l.Encode()
			if prev, ok := seen[string(body)]; ok {
				t.Fatalf("held=%v: nonces %s and %s give one body", held, prev, l.Nonce)
			}
			seen[string(body)] = l.Nonce
		}
	}
}

// Camunda's own objects are read as what they are: its bootstrap (empty, no
// metadata) as never held at version 0, its release (empty, metadata) as a
// legacy release at the version kept, its held lease as held, without nonce
// or duration (Foreign).
func TestWeReadCamundasObjects(t *testing.T) {
	l, err := nodeid.DecodeLease(3, nil, nil)
	if err != nil || l.Held() || !l.Legacy || l.Instance.Version != 0 || !l.Acquirable {
		t.Errorf("bootstrap: %+v, %v", l, err)
	}
	l, err = nodeid.DecodeLease(3, []byte{}, map[string]string{"taskid": "", "version": "2", "acquirable": "true"})
	if err != nil || l.Held() || !l.Legacy || l.Instance.Version != 2 {
		t.Errorf("release: %+v, %v", l, err)
	}
	l, err = nodeid.DecodeLease(3, nil, map[string]string{"taskid": "", "version": "2", "acquirable": "false"})
	if err != nil || l.Acquirable {
		t.Errorf("scaled down: %+v, %v", l, err)
	}
	body := []byte(`{"taskId":"camunda-task","timestamp":1764504000123,"nodeInstance":{"id":3,"version":4},"knownVersionMappings":{"mappingsByNodeId":{"3":4}}}`)
	l, err = nodeid.DecodeLease(3, body, map[string]string{"taskid": "camunda-task", "version": "4", "acquirable": "true"})
	if err != nil || !l.Held() || !l.Foreign() || l.Instance.Version != 4 || l.Expires.UnixMilli() != 1764504000123 || l.KnownVersions[3] != 4 {
		t.Errorf("held: %+v, %v", l, err)
	}
}
