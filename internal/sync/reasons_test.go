package sync_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every refusal reason the engine can report is part of its
// specification: some test of this package makes a run refuse for it and
// asserts it. The rule, checked on the package's syntax trees: every
// Reason* constant the package declares is named in the code (comments
// and strings do not count) of a _test.go file other than this one.
// Naming it outside an assertion would pass the rule, but a reader
// adding a reason sees at once which test must assert it.
func TestEveryRefusalReasonIsAsserted(t *testing.T) {
	const self = "reasons_test.go"
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{} // constant → file declaring it
	named := map[string][]string{}  // constant → test files naming it
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(name, "_test.go") {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if strings.HasPrefix(id.Name, "Reason") && id.IsExported() {
							declared[id.Name] = name
						}
					}
				}
			}
			continue
		}
		if name == self {
			continue
		}
		// fdlsync.ReasonX in the external test package, ReasonX in an
		// internal one: both are an *ast.Ident named ReasonX.
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && strings.HasPrefix(id.Name, "Reason") {
				named[id.Name] = append(named[id.Name], name)
			}
			return true
		})
	}
	if len(declared) < 10 {
		t.Fatalf("found %d Reason constants in %v; the parse is wrong", len(declared), files)
	}
	var missing []string
	for c, file := range declared {
		if len(named[c]) == 0 {
			missing = append(missing, c+" (declared in "+file+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("refusal reason %s is asserted by no test of the package: add a run that refuses for it", m)
	}
}
