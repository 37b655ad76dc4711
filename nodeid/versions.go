package nodeid

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/nodeid/nodeid/node"
)

// Version is a node ID's fencing token (see package node).
type Version = node.Version

// MaxVersion is the largest version accepted (see package node).
const MaxVersion = node.MaxVersion

// NodeInstance is one tenure of a node ID (see package node).
type NodeInstance = node.Instance

// VersionMappings is what a task knows of every node's current version. Each
// holder publishes its mappings in its lease, so a newcomer can tell when all
// peers have seen its new version (readiness).
type VersionMappings map[int]Version

// Clone returns an independent copy.
func (m VersionMappings) Clone() VersionMappings {
	c := make(VersionMappings, len(m))
	for id, v := range m {
		c[id] = v
	}
	return c
}

// Observe records v for id unless a higher version is already known:
// versions only grow.
func (m VersionMappings) Observe(id int, v Version) {
	if cur, ok := m[id]; !ok || v > cur {
		m[id] = v
	}
}

// versionMappingsJSON is the wire form, {"mappingsByNodeId": {"0": 3}}, kept
// compatible with the lease bodies of Camunda's S3 node-ID provider.
type versionMappingsJSON struct {
	MappingsByNodeID map[string]Version `json:"mappingsByNodeId"`
}

// MarshalJSON writes the mappings with node IDs as decimal keys.
func (m VersionMappings) MarshalJSON() ([]byte, error) {
	w := versionMappingsJSON{MappingsByNodeID: make(map[string]Version, len(m))}
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		w.MappingsByNodeID[strconv.Itoa(id)] = m[id]
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the wire form and rejects negative IDs and versions.
func (m *VersionMappings) UnmarshalJSON(b []byte) error {
	var w versionMappingsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	out := make(VersionMappings, len(w.MappingsByNodeID))
	for k, v := range w.MappingsByNodeID {
		id, err := parseNodeID(k)
		if err != nil {
			return fmt.Errorf("mappingsByNodeId: %w", err)
		}
		if v < 0 || v > MaxVersion {
			return fmt.Errorf("mappingsByNodeId: version %d for node %d is out of range", v, id)
		}
		out[id] = v
	}
	*m = out
	return nil
}

// parseNodeID accepts the canonical decimal form of a node ID only ("7", not
// "07", "+7" or "-1"), so one ID has exactly one key.
func parseNodeID(s string) (int, error) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("invalid node id %q", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("invalid node id %q", s)
		}
	}
	id, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("invalid node id %q", s)
	}
	return id, nil
}

// aboveLegacy is the version to write over a legacy (empty) object read at
// version v, with known the highest version any lease records for it. Every
// empty body has one ETag, so the If-Match also lands on a later empty state:
// after a whole tenure of a writer of empty bodies (Camunda's provider) that
// took v+1 and released. Writing the version kept would lower the object,
// and the next taker would hand out v+1 again; one above every version known
// keeps it from going down after one such tenure (docs/design.md, "Mixed
// operation with Camunda 8.9").
func aboveLegacy(v, known Version) Version {
	return min(max(v, known)+1, MaxVersion)
}
