package main_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// notATaskDefinition, on the last non-blank line before a ```json fence,
// exempts a deliberately partial snippet from TestECSExamplesInDocs.
const notATaskDefinition = "<!-- not a task definition -->"

// TestECSExamplesInDocs keeps the ECS JSON in README.md and docs/ honest.
// Every ```json block that looks like a task definition (it has
// "containerDefinitions") or a container definition ("name" and "image") must
// parse strictly (valid JSON, no duplicate keys, no trailing data, no field
// ECS's RegisterTaskDefinition does not have, every value of the right type)
// and pass checkECS: the values ECS accepts, the references between
// containers and volumes, the NODEID_ variables the subcommand in each
// container reads, and nodeid-init's own rules (docs/ecs.md). A snippet that
// is partial on purpose is marked with <!-- not a task definition --> on the
// line before its fence. `make docs-check` runs it.
func TestECSExamplesInDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	tasks, containers := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		for _, blk := range fencedBlocks(string(b)) {
			where := fmt.Sprintf("%s:%d", name, blk.line)
			looks := strings.Contains(blk.text, `"containerDefinitions"`) ||
				(strings.Contains(blk.text, `"name"`) && strings.Contains(blk.text, `"image"`))
			switch {
			case blk.marked && !(blk.info == "json" && looks):
				t.Errorf("%s: %s before a block that is no ECS JSON: remove the marker", where, notATaskDefinition)
			case blk.marked:
				t.Logf("%s: skipped (%s)", where, notATaskDefinition)
			case blk.info != "json" && strings.Contains(blk.text, `"containerDefinitions"`):
				t.Errorf("%s: a task definition in a block not marked json: it is not checked", where)
			case blk.info == "json" && looks:
				_, errs := checkECSJSON([]byte(blk.text))
				for _, e := range errs {
					t.Errorf("%s: %s", where, e)
				}
				if strings.Contains(blk.text, `"containerDefinitions"`) {
					tasks++
				} else {
					containers++
				}
			}
		}
	}
	// Guards the extraction: docs/ecs.md has three complete task
	// definitions, migration.md a container definition.
	if tasks < 3 || containers < 1 {
		t.Fatalf("found %d task and %d container definitions: the extraction no longer matches the docs", tasks, containers)
	}
	t.Logf("%d task definitions and %d container definitions checked", tasks, containers)
}

// TestECSCheckerRefusesBadExamples shows that checkECSJSON fails a broken
// example: each case breaks a valid task definition in one way.
func TestECSCheckerRefusesBadExamples(t *testing.T) {
	good := `{
  "family": "broker",
  "requiresCompatibilities": ["FARGATE"],
  "networkMode": "awsvpc",
  "cpu": "1024",
  "memory": "4096",
  "taskRoleArn": "arn:aws:iam::123456789012:role/broker-task",
  "containerDefinitions": [
    {
      "name": "nodeid-acquire",
      "image": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/nodeid-init:0.1.0",
      "essential": false,
      "command": ["acquire"],
      "environment": [
        { "name": "NODEID_BUCKET", "value": "BUCKET" },
        { "name": "NODEID_CLUSTER_SIZE", "value": "3" },
        { "name": "NODEID_ENV_FILE", "value": "/var/lib/nodeid/node.env" },
        { "name": "NODEID_LEASE_FILE", "value": "/var/lib/nodeid/lease.json" }
      ],
      "mountPoints": [{ "sourceVolume": "nodeid", "containerPath": "/var/lib/nodeid" }]
    },
    {
      "name": "broker",
      "image": "registry.example.com:5000/team/broker-with-nodeid:2.1",
      "entryPoint": ["/usr/local/bin/nodeid-init", "run", "--"],
      "command": ["/usr/local/bin/broker"],
      "dependsOn": [{ "containerName": "nodeid-acquire", "condition": "SUCCESS" }],
      "environment": [
        { "name": "NODEID_BUCKET", "value": "BUCKET" },
        { "name": "NODEID_CLUSTER_SIZE", "value": "3" },
        { "name": "NODEID_DATA_ROOT", "value": "/data" },
        { "name": "NODEID_LEASE_FILE", "value": "/tmp/nodeid-lease.json" },
        { "name": "NODEID_STOP_TIMEOUT", "value": "50s" }
      ],
      "mountPoints": [{ "sourceVolume": "data", "containerPath": "/data" }],
      "healthCheck": { "command": ["CMD", "/usr/local/bin/nodeid-init", "health"], "interval": 10, "retries": 3 },
      "stopTimeout": 60
    }
  ],
  "volumes": [
    { "name": "nodeid" },
    { "name": "data", "efsVolumeConfiguration": { "fileSystemId": "fs-0123456789abcdef0", "transitEncryption": "ENABLED" } }
  ]
}`
	if kind, errs := checkECSJSON([]byte(good)); kind != "task definition" || len(errs) > 0 {
		t.Fatalf("the valid example: %s, %q", kind, errs)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"not JSON", `"essential": false,`, `"essential": false`, "invalid JSON"},
		{"duplicate key", `"memory": "4096",`, `"memory": "4096", "memory": "8192",`, `duplicate key "memory"`},
		{"unknown top-level key", `"family": "broker",`, `"family": "broker", "famly": "x",`, `unknown field "famly"`},
		{"key in the wrong case", `"entryPoint"`, `"EntryPoint"`, `unknown field "EntryPoint"`},
		{"unknown container key", `"stopTimeout": 60`, `"stopTimeout": 60, "stopTimout": 60`, `unknown field "stopTimout"`},
		{"wrong type", `"cpu": "1024"`, `"cpu": 1024`, "cannot unmarshal number"},
		{"misspelt environment field", `"value": "BUCKET" }`, `"valu": "BUCKET" }`, `unknown field "valu"`},
		{"environment entry without value", `{ "name": "NODEID_BUCKET", "value": "BUCKET" }`, `{ "name": "NODEID_BUCKET" }`, "needs name and value"},
		{"unknown NODEID variable", `"NODEID_DATA_ROOT"`, `"NODEID_DATAROOT"`, "NODEID_DATAROOT, which nodeid-init run does not read"},
		{"variable of another subcommand", `"NODEID_ENV_FILE"`, `"NODEID_STOP_TIMEOUT"`, "NODEID_STOP_TIMEOUT, which nodeid-init acquire does not read"},
		{"dependsOn an unknown container", `"containerName": "nodeid-acquire"`, `"containerName": "nodeid-aquire"`, `no container "nodeid-aquire"`},
		{"bad condition", `"condition": "SUCCESS"`, `"condition": "SUCCEEDED"`, `condition "SUCCEEDED"`},
		{"SUCCESS on an essential container", `"essential": false,`, `"essential": true,`, "essential"},
		{"HEALTHY without a health check", `"condition": "SUCCESS"`, `"condition": "HEALTHY"`, "no healthCheck"},
		{"missing volume", `"sourceVolume": "data"`, `"sourceVolume": "efs"`, `volume "efs"`},
		{"duplicate container name", `"name": "broker"`, `"name": "nodeid-acquire"`, `container name "nodeid-acquire" twice`},
		{"stopTimeout too long", `"stopTimeout": 60`, `"stopTimeout": 300`, "stopTimeout 300"},
		{"NODEID_STOP_TIMEOUT not below stopTimeout", `"50s"`, `"60s"`, "below the container's stopTimeout"},
		{"health check interval", `"interval": 10`, `"interval": 1`, "interval 1"},
		{"health check without a lease file", `{ "name": "NODEID_LEASE_FILE", "value": "/tmp/nodeid-lease.json" },`, ``, "NODEID_LEASE_FILE"},
		{"lease file on EFS", `"/tmp/nodeid-lease.json"`, `"/data/lease.json"`, "on the EFS volume"},
		{"data root not mounted", `"value": "/data" }`, `"value": "/mnt/efs" }`, "not on a mounted volume"},
		{"bad image reference", `broker-with-nodeid:2.1`, `Broker With Nodeid:2.1`, "not a well-formed image reference"},
		{"run in a shell", `"entryPoint": ["/usr/local/bin/nodeid-init", "run", "--"],
      "command": ["/usr/local/bin/broker"],`, `"entryPoint": ["sh", "-c"],
      "command": ["nodeid-init run -- /usr/local/bin/broker"],`, "must be the entrypoint"},
		{"run with pidMode task", `"networkMode": "awsvpc",`, `"networkMode": "awsvpc", "pidMode": "task",`, "pidMode"},
		{"run without a command", `"command": ["/usr/local/bin/broker"],`, ``, "no command after --"},
		{"unknown subcommand", `"command": ["acquire"]`, `"command": ["aquire"]`, `no subcommand "aquire"`},
		{"unknown flag", `"command": ["acquire"]`, `"command": ["acquire", "--env", "/x"]`, "does not accept --env"},
		{"no essential container", `"stopTimeout": 60`, `"stopTimeout": 60, "essential": false`, "no essential container"},
		{"no task role", `"taskRoleArn": "arn:aws:iam::123456789012:role/broker-task",`, ``, "taskRoleArn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("the valid example has no %q", tc.old)
			}
			broken := strings.Replace(good, tc.old, tc.new, 1)
			_, errs := checkECSJSON([]byte(broken))
			for _, e := range errs {
				if strings.Contains(e, tc.want) {
					return
				}
			}
			t.Errorf("no error containing %q; got %q", tc.want, errs)
		})
	}
}

// TestECSFencedBlocksMarker: fencedBlocks finds indented fences and their
// info strings, and the marker only on the last non-blank line before one.
func TestECSFencedBlocksMarker(t *testing.T) {
	md := "text\n\n" + notATaskDefinition + "\n\n```json\n{\"name\": \"a\", \"image\": \"b\"}\n```\n\n" +
		notATaskDefinition + "\nmore text\n  ```json\n  {}\n  ```\n```\nplain\n```\n"
	got := fencedBlocks(md)
	want := []block{
		{line: 5, info: "json", text: `{"name": "a", "image": "b"}`, marked: true},
		{line: 11, info: "json", text: "  {}"},
		{line: 14, text: "plain"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fencedBlocks:\n got %v\nwant %v", got, want)
	}
}

// block is a fenced code block of a Markdown text.
type block struct {
	line   int    // of the opening fence, 1-based
	info   string // the info string, e.g. "json"
	text   string
	marked bool // notATaskDefinition on the last non-blank line before it
}

var fenceRe = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_+-]*)\\s*$")

// fencedBlocks returns the ``` blocks of a Markdown text, indented ones
// (inside list items) included.
func fencedBlocks(md string) []block {
	var out []block
	lines := strings.Split(md, "\n")
	prev := "" // last non-blank line outside a block
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.TrimSpace(lines[i]) != "" {
				prev = strings.TrimSpace(lines[i])
			}
			continue
		}
		b := block{line: i + 1, info: m[1], marked: prev == notATaskDefinition}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		b.text = strings.Join(body, "\n")
		out = append(out, b)
		prev = "```"
	}
	return out
}

// The subset of ECS's RegisterTaskDefinition input that the docs use (field
// names and types as in the API; the AWS CLI's --cli-input-json takes the
// same). A field not listed here fails the check: add it when an example
// needs it, after checking its name and type in the API reference.
type (
	taskDefinition struct {
		Family                  string                `json:"family"`
		TaskRoleArn             string                `json:"taskRoleArn"`
		ExecutionRoleArn        string                `json:"executionRoleArn"`
		NetworkMode             string                `json:"networkMode"`
		RequiresCompatibilities []string              `json:"requiresCompatibilities"`
		CPU                     string                `json:"cpu"`
		Memory                  string                `json:"memory"`
		PidMode                 string                `json:"pidMode"`
		RuntimePlatform         *runtimePlatform      `json:"runtimePlatform"`
		EphemeralStorage        *ephemeralStorage     `json:"ephemeralStorage"`
		ContainerDefinitions    []containerDefinition `json:"containerDefinitions"`
		Volumes                 []volume              `json:"volumes"`
	}
	runtimePlatform struct {
		OperatingSystemFamily string `json:"operatingSystemFamily"`
		CPUArchitecture       string `json:"cpuArchitecture"`
	}
	ephemeralStorage struct {
		SizeInGiB int `json:"sizeInGiB"`
	}
	containerDefinition struct {
		Name                   string            `json:"name"`
		Image                  string            `json:"image"`
		Essential              *bool             `json:"essential"`
		EntryPoint             []string          `json:"entryPoint"`
		Command                []string          `json:"command"`
		Environment            []keyValue        `json:"environment"`
		Secrets                []secret          `json:"secrets"`
		DependsOn              []dependency      `json:"dependsOn"`
		MountPoints            []mountPoint      `json:"mountPoints"`
		HealthCheck            *healthCheck      `json:"healthCheck"`
		StopTimeout            *int              `json:"stopTimeout"`
		StartTimeout           *int              `json:"startTimeout"`
		PortMappings           []portMapping     `json:"portMappings"`
		LogConfiguration       *logConfiguration `json:"logConfiguration"`
		User                   string            `json:"user"`
		WorkingDirectory       string            `json:"workingDirectory"`
		Ulimits                []ulimit          `json:"ulimits"`
		LinuxParameters        *linuxParameters  `json:"linuxParameters"`
		CPU                    *int              `json:"cpu"`
		Memory                 *int              `json:"memory"`
		MemoryReservation      *int              `json:"memoryReservation"`
		ReadonlyRootFilesystem *bool             `json:"readonlyRootFilesystem"`
	}
	keyValue struct {
		Name  *string `json:"name"`
		Value *string `json:"value"`
	}
	secret struct {
		Name      string `json:"name"`
		ValueFrom string `json:"valueFrom"`
	}
	dependency struct {
		ContainerName string `json:"containerName"`
		Condition     string `json:"condition"`
	}
	mountPoint struct {
		SourceVolume  string `json:"sourceVolume"`
		ContainerPath string `json:"containerPath"`
		ReadOnly      *bool  `json:"readOnly"`
	}
	healthCheck struct {
		Command     []string `json:"command"`
		Interval    *int     `json:"interval"`
		Timeout     *int     `json:"timeout"`
		Retries     *int     `json:"retries"`
		StartPeriod *int     `json:"startPeriod"`
	}
	portMapping struct {
		ContainerPort int    `json:"containerPort"`
		HostPort      *int   `json:"hostPort"`
		Protocol      string `json:"protocol"`
		Name          string `json:"name"`
		AppProtocol   string `json:"appProtocol"`
	}
	logConfiguration struct {
		LogDriver     string            `json:"logDriver"`
		Options       map[string]string `json:"options"`
		SecretOptions []secret          `json:"secretOptions"`
	}
	ulimit struct {
		Name      string `json:"name"`
		SoftLimit int    `json:"softLimit"`
		HardLimit int    `json:"hardLimit"`
	}
	linuxParameters struct {
		InitProcessEnabled *bool         `json:"initProcessEnabled"`
		Capabilities       *capabilities `json:"capabilities"`
		SharedMemorySize   *int          `json:"sharedMemorySize"`
		Tmpfs              []tmpfs       `json:"tmpfs"`
	}
	capabilities struct {
		Add  []string `json:"add"`
		Drop []string `json:"drop"`
	}
	tmpfs struct {
		ContainerPath string   `json:"containerPath"`
		Size          int      `json:"size"`
		MountOptions  []string `json:"mountOptions"`
	}
	volume struct {
		Name string `json:"name"`
		Host *struct {
			SourcePath string `json:"sourcePath"`
		} `json:"host"`
		EFSVolumeConfiguration *efsVolumeConfiguration `json:"efsVolumeConfiguration"`
	}
	efsVolumeConfiguration struct {
		FileSystemID          string `json:"fileSystemId"`
		RootDirectory         string `json:"rootDirectory"`
		TransitEncryption     string `json:"transitEncryption"`
		TransitEncryptionPort *int   `json:"transitEncryptionPort"`
		AuthorizationConfig   *struct {
			AccessPointID string `json:"accessPointId"`
			IAM           string `json:"iam"`
		} `json:"authorizationConfig"`
	}
)

// checkECSJSON parses a task definition, a container definition or an array
// of container definitions strictly and checks it. kind says which it was.
func checkECSJSON(data []byte) (kind string, errs []string) {
	if err := checkJSONKeys(data); err != nil {
		return "", []string{"invalid JSON: " + err.Error()}
	}
	var probe any
	if err := json.Unmarshal(data, &probe); err != nil {
		return "", []string{"invalid JSON: " + err.Error()}
	}
	switch p := probe.(type) {
	case map[string]any:
		if _, ok := p["containerDefinitions"]; ok {
			var td taskDefinition
			if errs := exactKeys(probe, reflect.TypeOf(td), ""); len(errs) > 0 {
				return "task definition", errs
			}
			if err := decodeStrict(data, &td); err != nil {
				return "task definition", []string{err.Error()}
			}
			return "task definition", checkTask(&td)
		}
		var c containerDefinition
		if errs := exactKeys(probe, reflect.TypeOf(c), ""); len(errs) > 0 {
			return "container definition", errs
		}
		if err := decodeStrict(data, &c); err != nil {
			return "container definition", []string{err.Error()}
		}
		return "container definition", checkContainer(&c, nil)
	case []any:
		var cs []containerDefinition
		if errs := exactKeys(probe, reflect.TypeOf(cs), ""); len(errs) > 0 {
			return "container definition", errs
		}
		if err := decodeStrict(data, &cs); err != nil {
			return "container definition", []string{err.Error()}
		}
		for i := range cs {
			errs = append(errs, checkContainer(&cs[i], nil)...)
		}
		return "container definition", errs
	}
	return "", []string{"neither a task definition nor a container definition"}
}

// exactKeys checks the keys of the objects in v against the json tags of the
// struct type t, case-sensitively (encoding/json matches them ignoring case;
// ECS does not): "EntryPoint" is an unknown field.
func exactKeys(v any, t reflect.Type, at string) (errs []string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case []any:
		if t.Kind() == reflect.Slice {
			for i, e := range v {
				errs = append(errs, exactKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil // a map, e.g. logConfiguration.options
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			fields[strings.Split(t.Field(i).Tag.Get("json"), ",")[0]] = t.Field(i).Type
		}
		for k, e := range v {
			ft, ok := fields[k]
			if !ok {
				where := at
				if where == "" {
					where = "the top level"
				}
				errs = append(errs, fmt.Sprintf("unknown field %q in %s (ECS field names are case-sensitive)", k, where))
				continue
			}
			errs = append(errs, exactKeys(e, ft, strings.TrimPrefix(at+"."+k, "."))...)
		}
		sort.Strings(errs)
	}
	return errs
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not an ECS definition: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("invalid JSON: data after the first value")
	}
	return nil
}

// checkJSONKeys walks one JSON value and fails on a syntax error or on an
// object with a key twice (encoding/json keeps the last silently).
func checkJSONKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("duplicate key %q", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the first value")
	}
	return nil
}

var (
	nameRe     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	envRe      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	roleRe     = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$`)
	efsIDRe    = regexp.MustCompile(`^fs-[0-9a-f]{8,40}$`)
	imageRe    = imageReference()
	flagArgRe  = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)`)
	shells     = []string{"sh", "bash", "ash", "dash", "zsh"}
	shellRunRe = regexp.MustCompile(`(^|[\s/;&|])nodeid-init\s+run\b`)
)

// imageReference is the grammar of an image reference
// ([registry[:port]/]path[:tag][@digest]) of github.com/distribution/reference,
// IPv6 registries left out.
func imageReference() *regexp.Regexp {
	alnum := `[a-z0-9]+`
	sep := `(?:[._]|__|[-]+)`
	component := alnum + `(?:` + sep + alnum + `)*`
	label := `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domain := label + `(?:\.` + label + `)*(?::[0-9]+)?`
	tag := `[\w][\w.-]{0,127}`
	digest := `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	return regexp.MustCompile(`^(?:` + domain + `/)?` + component + `(?:/` + component + `)*(?::` + tag + `)?(?:@` + digest + `)?$`)
}

func oneOf(v string, set ...string) bool { return contains(set, v) }

func contains(set []string, v string) bool {
	for _, s := range set {
		if s == v {
			return true
		}
	}
	return false
}

func checkTask(td *taskDefinition) (errs []string) {
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if !nameRe.MatchString(td.Family) {
		bad("family %q: 1-255 letters, digits, _ and -", td.Family)
	}
	for _, r := range []string{td.TaskRoleArn, td.ExecutionRoleArn} {
		if r != "" && !roleRe.MatchString(r) {
			bad("%q is not an IAM role ARN", r)
		}
	}
	if td.NetworkMode != "" && !oneOf(td.NetworkMode, "awsvpc", "bridge", "host", "none") {
		bad("networkMode %q", td.NetworkMode)
	}
	for _, c := range td.RequiresCompatibilities {
		if !oneOf(c, "EC2", "FARGATE", "EXTERNAL", "MANAGED_INSTANCES") {
			bad("requiresCompatibilities %q", c)
		}
	}
	fargate := contains(td.RequiresCompatibilities, "FARGATE")
	if fargate && td.NetworkMode != "awsvpc" {
		bad("FARGATE needs networkMode awsvpc, not %q", td.NetworkMode)
	}
	for field, v := range map[string]string{"cpu": td.CPU, "memory": td.Memory} {
		if v == "" && fargate {
			bad("FARGATE needs the task's %s", field)
		} else if _, err := strconv.Atoi(v); v != "" && err != nil {
			bad("%s %q: a number (as a string)", field, v)
		}
	}
	if !oneOf(td.PidMode, "", "task", "host") {
		bad("pidMode %q", td.PidMode)
	}
	if rp := td.RuntimePlatform; rp != nil {
		if rp.OperatingSystemFamily != "" && rp.OperatingSystemFamily != "LINUX" {
			bad("runtimePlatform.operatingSystemFamily %q: nodeid-init is Linux only", rp.OperatingSystemFamily)
		}
		if !oneOf(rp.CPUArchitecture, "", "X86_64", "ARM64") {
			bad("runtimePlatform.cpuArchitecture %q", rp.CPUArchitecture)
		}
	}
	if es := td.EphemeralStorage; es != nil && (es.SizeInGiB < 21 || es.SizeInGiB > 200) {
		bad("ephemeralStorage.sizeInGiB %d: 21..200", es.SizeInGiB)
	}
	vols := map[string]bool{}
	for _, v := range td.Volumes {
		if !nameRe.MatchString(v.Name) {
			bad("volume name %q", v.Name)
		}
		if vols[v.Name] {
			bad("volume %q twice", v.Name)
		}
		vols[v.Name] = true
		if e := v.EFSVolumeConfiguration; e != nil {
			if v.Host != nil {
				bad("volume %q: host and efsVolumeConfiguration", v.Name)
			}
			if !efsIDRe.MatchString(e.FileSystemID) {
				bad("volume %q: fileSystemId %q", v.Name, e.FileSystemID)
			}
			if !oneOf(e.TransitEncryption, "", "ENABLED", "DISABLED") {
				bad("volume %q: transitEncryption %q", v.Name, e.TransitEncryption)
			}
			if a := e.AuthorizationConfig; a != nil {
				if e.TransitEncryption != "ENABLED" {
					bad("volume %q: authorizationConfig needs transitEncryption ENABLED", v.Name)
				}
				if !oneOf(a.IAM, "", "ENABLED", "DISABLED") {
					bad("volume %q: iam %q", v.Name, a.IAM)
				}
				if a.AccessPointID != "" && !strings.HasPrefix(a.AccessPointID, "fsap-") {
					bad("volume %q: accessPointId %q", v.Name, a.AccessPointID)
				}
			}
		}
	}
	if len(td.ContainerDefinitions) == 0 {
		bad("no containerDefinitions")
	}
	names := map[string]*containerDefinition{}
	essential := false
	for i := range td.ContainerDefinitions {
		c := &td.ContainerDefinitions[i]
		if names[c.Name] != nil {
			bad("container name %q twice", c.Name)
		}
		names[c.Name] = c
		essential = essential || c.Essential == nil || *c.Essential
	}
	if !essential {
		bad("no essential container")
	}
	nodeidUsed := false
	shared := map[string]map[string]string{} // subcommand -> variable -> value, for acquire and renew
	for i := range td.ContainerDefinitions {
		c := &td.ContainerDefinitions[i]
		errs = append(errs, checkContainer(c, td)...)
		for _, d := range c.DependsOn {
			dep := names[d.ContainerName]
			switch {
			case dep == nil:
				bad("container %q depends on no container %q", c.Name, d.ContainerName)
			case dep == c:
				bad("container %q depends on itself", c.Name)
			case (d.Condition == "SUCCESS" || d.Condition == "COMPLETE") && (dep.Essential == nil || *dep.Essential):
				bad("container %q: condition %s on %q, which is essential (ECS refuses it)", c.Name, d.Condition, dep.Name)
			case d.Condition == "HEALTHY" && dep.HealthCheck == nil:
				bad("container %q: condition HEALTHY on %q, which has no healthCheck", c.Name, dep.Name)
			}
		}
		env := map[string]string{}
		for _, kv := range c.Environment {
			if kv.Name != nil && kv.Value != nil {
				env[*kv.Name] = *kv.Value
				nodeidUsed = nodeidUsed || strings.HasPrefix(*kv.Name, "NODEID_")
			}
		}
		sub, _ := nodeidArgs(c)
		nodeidUsed = nodeidUsed || sub != ""
		if sub == "acquire" || sub == "renew" {
			shared[sub] = env
		}
	}
	if nodeidUsed && td.TaskRoleArn == "" {
		bad("no taskRoleArn: nodeid-init needs a task role for S3")
	}
	// acquire hands the lease to renew: they must agree on where it lives.
	if a, r := shared["acquire"], shared["renew"]; a != nil && r != nil {
		for _, v := range []string{"NODEID_BUCKET", "NODEID_PREFIX", "NODEID_CLUSTER_SIZE", "NODEID_LEASE_DURATION", "NODEID_ENV_FILE", "NODEID_HANDOFF_FILE", "NODEID_LEASE_FILE", "NODEID_S3_REGION", "NODEID_S3_ENDPOINT"} {
			if a[v] != r[v] {
				bad("acquire and renew disagree on %s: %q and %q", v, a[v], r[v])
			}
		}
	}
	return errs
}

// nodeidArgs returns the nodeid-init subcommand a container runs and its
// arguments after it, if its argv (entryPoint, then command) starts with
// nodeid-init; argv[0] is nodeid-init too when the entryPoint is the image's
// (the nodeid-init image's ENTRYPOINT).
func nodeidArgs(c *containerDefinition) (string, []string) {
	argv := append(append([]string{}, c.EntryPoint...), c.Command...)
	if len(c.EntryPoint) == 0 && strings.Contains(c.Image, "/nodeid-init:") {
		argv = append([]string{"/usr/local/bin/nodeid-init"}, argv...)
	}
	if len(argv) < 2 || path.Base(argv[0]) != "nodeid-init" {
		return "", nil
	}
	return argv[1], argv[2:]
}

// checkContainer checks one container definition; td is its task
// definition, nil for a container definition shown on its own.
func checkContainer(c *containerDefinition, td *taskDefinition) (errs []string) {
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Sprintf("container %q: ", c.Name)+fmt.Sprintf(format, a...))
	}
	if !nameRe.MatchString(c.Name) {
		bad("name: 1-255 letters, digits, _ and -")
	}
	if len(c.Image) > 255 || !imageRe.MatchString(c.Image) {
		bad("image %q is not a well-formed image reference", c.Image)
	}
	env := map[string]string{}
	for _, kv := range c.Environment {
		if kv.Name == nil || kv.Value == nil {
			bad("an environment entry needs name and value")
			continue
		}
		if !envRe.MatchString(*kv.Name) {
			bad("environment name %q", *kv.Name)
		}
		if _, dup := env[*kv.Name]; dup {
			bad("environment %s twice", *kv.Name)
		}
		env[*kv.Name] = *kv.Value
	}
	for _, s := range c.Secrets {
		if !envRe.MatchString(s.Name) || s.ValueFrom == "" {
			bad("secret %q needs a name and valueFrom", s.Name)
		}
	}
	sub, args := nodeidArgs(c)
	for v := range env {
		if !strings.HasPrefix(v, "NODEID_") {
			continue
		}
		switch {
		case sub != "" && !readsEnv(sub, v):
			bad("sets %s, which nodeid-init %s does not read", v, sub)
		case sub == "" && !knownEnv(v):
			bad("sets %s, which no nodeid-init subcommand reads", v)
		}
	}
	if sub != "" {
		h := help(sub)
		if !strings.HasPrefix(h, "usage: nodeid-init "+sub) {
			bad("no subcommand %q", sub)
		}
		dashdash := false
		for i, a := range args {
			if a == "--" {
				dashdash = true
				if sub == "run" && i == len(args)-1 {
					bad("nodeid-init run: no command after --")
				}
				break
			}
			if m := flagArgRe.FindStringSubmatch(a); m != nil &&
				!strings.Contains(h, "  -"+m[1]+" ") && !strings.Contains(h, "  -"+m[1]+"\n") {
				bad("nodeid-init %s does not accept --%s", sub, m[1])
			}
		}
		if sub == "run" && !dashdash {
			bad("nodeid-init run: no command after --")
		}
	}
	// run must be PID 1 of the container's own PID namespace (docs/ecs.md).
	argv := append(append([]string{}, c.EntryPoint...), c.Command...)
	if sub == "" && len(argv) > 0 && contains(shells, path.Base(argv[0])) && shellRunRe.MatchString(strings.Join(argv, " ")) {
		bad("nodeid-init run must be the entrypoint, not the child of a shell")
	}
	if sub == "run" && td != nil && td.PidMode != "" {
		bad("nodeid-init run with pidMode %q: leave it unset, so that run is PID 1 of the container's PID namespace", td.PidMode)
	}
	// Dependencies.
	for _, d := range c.DependsOn {
		if !oneOf(d.Condition, "START", "COMPLETE", "SUCCESS", "HEALTHY") {
			bad("dependsOn %q: condition %q (START, COMPLETE, SUCCESS or HEALTHY)", d.ContainerName, d.Condition)
		}
	}
	// Mount points, and which paths are on EFS.
	vols := map[string]*volume{}
	if td != nil {
		for i := range td.Volumes {
			vols[td.Volumes[i].Name] = &td.Volumes[i]
		}
	}
	var mounts, efsMounts []string // containerPaths, and those of EFS volumes
	for _, m := range c.MountPoints {
		if td != nil && vols[m.SourceVolume] == nil {
			bad("mountPoints: no volume %q in volumes", m.SourceVolume)
		}
		if !path.IsAbs(m.ContainerPath) || path.Clean(m.ContainerPath) != m.ContainerPath {
			bad("mountPoints: containerPath %q: an absolute, clean path", m.ContainerPath)
		}
		if contains(mounts, m.ContainerPath) {
			bad("mountPoints: %s twice", m.ContainerPath)
		}
		mounts = append(mounts, m.ContainerPath)
		if v := vols[m.SourceVolume]; v != nil && v.EFSVolumeConfiguration != nil {
			efsMounts = append(efsMounts, m.ContainerPath)
		}
	}
	under := func(p string, dirs []string) bool {
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	if root, ok := env["NODEID_DATA_ROOT"]; ok && !under(root, mounts) {
		bad("NODEID_DATA_ROOT %s is not on a mounted volume (the shared EFS data root)", root)
	}
	for _, v := range []string{"NODEID_LEASE_FILE", "NODEID_ENV_FILE", "NODEID_HANDOFF_FILE", "NODEID_PEERS_FILE"} {
		if p, ok := env[v]; ok && under(p, efsMounts) {
			bad("%s %s is on the EFS volume: keep it on the task's local storage (its deadline is this host's CLOCK_BOOTTIME)", v, p)
		}
	}
	// Health check.
	if hc := c.HealthCheck; hc != nil {
		switch {
		case len(hc.Command) < 2 || !oneOf(hc.Command[0], "CMD", "CMD-SHELL"):
			bad(`healthCheck.command: ["CMD", ...] or ["CMD-SHELL", "..."]`)
		case hc.Command[0] == "CMD-SHELL" && len(hc.Command) != 2:
			bad("healthCheck.command: CMD-SHELL takes one string")
		}
		for _, r := range []struct {
			name     string
			v        *int
			min, max int
		}{{"interval", hc.Interval, 5, 300}, {"timeout", hc.Timeout, 2, 60}, {"retries", hc.Retries, 1, 10}, {"startPeriod", hc.StartPeriod, 0, 300}} {
			if r.v != nil && (*r.v < r.min || *r.v > r.max) {
				bad("healthCheck.%s %d: %d..%d", r.name, *r.v, r.min, r.max)
			}
		}
		if strings.Contains(strings.Join(hc.Command, " "), "nodeid-init health") && env["NODEID_LEASE_FILE"] == "" {
			bad("healthCheck runs nodeid-init health, which needs NODEID_LEASE_FILE in the container's environment")
		}
	}
	stop := 30 // ECS's default
	if c.StopTimeout != nil {
		stop = *c.StopTimeout
		if stop < 1 || stop > 120 {
			bad("stopTimeout %d: 1..120", stop)
		}
	}
	if sub == "run" {
		st := 25 * time.Second // --stop-timeout's default
		if v, ok := env["NODEID_STOP_TIMEOUT"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				bad("NODEID_STOP_TIMEOUT %q: not a duration", v)
			}
			st = d
		}
		if st >= time.Duration(stop)*time.Second {
			bad("NODEID_STOP_TIMEOUT %v must be below the container's stopTimeout %ds, so that the release comes before ECS's SIGKILL", st, stop)
		}
	}
	// Ports, logs, limits.
	ports := map[string]bool{}
	for _, p := range c.PortMappings {
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			bad("portMappings: containerPort %d", p.ContainerPort)
		}
		if !oneOf(p.Protocol, "", "tcp", "udp") {
			bad("portMappings: protocol %q", p.Protocol)
		}
		if td != nil && td.NetworkMode == "awsvpc" && p.HostPort != nil && *p.HostPort != p.ContainerPort {
			bad("portMappings: with awsvpc hostPort must equal containerPort")
		}
		key := fmt.Sprint(p.ContainerPort, p.Protocol)
		if ports[key] {
			bad("portMappings: %d twice", p.ContainerPort)
		}
		ports[key] = true
	}
	if l := c.LogConfiguration; l != nil && !oneOf(l.LogDriver, "awslogs", "awsfirelens", "fluentd", "gelf", "journald", "json-file", "splunk", "syslog") {
		bad("logConfiguration.logDriver %q", l.LogDriver)
	}
	for _, u := range c.Ulimits {
		if u.Name == "" || u.SoftLimit > u.HardLimit {
			bad("ulimits %q: name, softLimit <= hardLimit", u.Name)
		}
	}
	return errs
}

// TestECSImageDockerfile builds nodeid-init the way the Dockerfile's builder
// stage does (its go build line, VERSION set) and checks what docs/ecs.md
// says of the image: the version reaches `nodeid-init version`, the binary
// is static, and the final stage keeps the layout of the image make image builds. It does
// not run Docker.
func TestECSImageDockerfile(t *testing.T) {
	df, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(df), "\\\n", " ")
	for _, want := range []string{
		"FROM golang:1.26 AS build",
		"ARG VERSION=",
		"COPY --from=build /out/usr/local/bin/nodeid-init /usr/local/bin/nodeid-init\n",
		"COPY --from=build --chown=65532:65532 /out/var/lib/nodeid /var/lib/nodeid\n",
		"mkdir -p /out/var/lib/nodeid",
		`VOLUME ["/var/lib/nodeid"]`,
		`org.opencontainers.image.licenses="Apache-2.0"`,
		"USER 65532:65532\n",
		`ENTRYPOINT ["/usr/local/bin/nodeid-init"]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile: no %q", want)
		}
	}
	m := regexp.MustCompile(`RUN (CGO_ENABLED=0) go build (-trimpath) -ldflags "([^"]*)"\s+-o \S+ (\./cmd/nodeid-init)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("Dockerfile: no RUN CGO_ENABLED=0 go build -trimpath -ldflags \"...\" -o ... ./cmd/nodeid-init")
	}
	out := filepath.Join(t.TempDir(), "nodeid-init")
	build := exec.Command("go", "build", m[2], "-ldflags", strings.ReplaceAll(m[3], "${VERSION}", "1.2.3-docker"), "-o", out, m[4])
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), m[1])
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", build.Args, err, b)
	}
	v, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "nodeid-init 1.2.3-docker ") {
		t.Errorf("nodeid-init version: %q, %v; want the VERSION build-arg", v, err)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v): it would not run on distroless static", p.Type)
		}
	}
}
