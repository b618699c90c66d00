// gendash writes the dashboards' JSON files (go generate ./dashboards).
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/bermsec/berm/dashboards/internal/board"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, d := range board.All() {
		b, err := d.JSON()
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d.File), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
