package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecipesOnThePageAreTheTestedScripts keeps docs/recipes.md showing
// the scripts these tests run, character for character.
func TestRecipesOnThePageAreTheTestedScripts(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	scripts, _ := filepath.Glob(filepath.Join("..", "docs", "recipes", "*.sh"))
	if len(scripts) < 2 {
		t.Fatalf("recipes found: %v", scripts)
	}
	for _, p := range scripts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(page), "```sh\n"+string(b)+"```\n") {
			t.Errorf("docs/recipes.md does not show %s as it is", filepath.Base(p))
		}
	}
}
