// Package web holds the bundled demo page: plain HTML, CSS and JavaScript embedded in the binary,
// with no build step and no CDN.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Files is the page's file tree, rooted at index.html.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time; this cannot fail at run time
	}
	return sub
}
