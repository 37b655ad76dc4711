package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Issue 23.11: shquote makes any value one word for sh, with nothing in it
// run: a rendered env file sourced by sh gives back the values exactly.
func TestShquoteInTemplatesIsDataForTheShell(t *testing.T) {
	dir := t.TempDir()
	src := writeTemplate(t, dir, "node.env.tmpl", "DATA_DIR={{shquote .DataDir}}\nTASK={{shquote .TaskID}}\nEMPTY={{shquote .Address}}\n")
	dst := filepath.Join(dir, "node.env")
	specs, err := parseTemplates(src + ":" + dst)
	if err == nil {
		err = holdTemplateOutputs(specs)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTemplates(specs, 1); err != nil {
		t.Fatal(err)
	}
	dataDir := dir + `/a b'c"d $(touch PWNED) ` + "`touch PWNED`" + ` ;x\y'/node-0/v1`
	if _, err := renderTemplates(specs, templateData{DataDir: dataDir, TaskID: "arn:aws:ecs:eu-west-1:1:task/c/abc"}, nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `. ./node.env && printf '%s\n%s\n[%s]' "$DATA_DIR" "$TASK" "$EMPTY"`)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sourcing the rendered file: %v\n%s", err, out)
	}
	if want := dataDir + "\narn:aws:ecs:eu-west-1:1:task/c/abc\n[]"; string(out) != want {
		t.Errorf("sh read back\n%s\nwant\n%s", out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Fatal("sourcing the rendered file ran a command")
	}
}
