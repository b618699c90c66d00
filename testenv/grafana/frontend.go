package grafana

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// FrontendDir is where the built web frontend of Version is kept: its public/ (Grafana's static
// root: views/index.html, build/, the core plugins' plugin.json). One directory per source
// version, so a new version builds beside the old one.
func FrontendDir() string {
	return filepath.Join(CacheDir(), "frontend-"+Version)
}

// Frontend is the built web frontend's public/ directory, building it when it is not there:
// Grafana's source from its Go module, yarn (the release the source carries in .yarn/releases)
// installing its packages from the npm registry, and webpack's development build without type
// check or source maps (cold: about 6 minutes of install and 1 of build on two cores). A file
// lock keeps concurrent callers (parallel test binaries) to one build; the marker is written
// last, so a failed build is retried.
func Frontend(ctx context.Context) (string, error) {
	dir := FrontendDir()
	err := buildOnce("frontend", func() bool { return frontendOK(dir) }, func(cache string) error {
		return buildFrontend(ctx, cache, dir)
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "public"), nil
}

func frontendOK(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "built"))
	return err == nil
}

// frontendEnv: no browser or binary downloads by packages' install scripts, no git hooks, no
// telemetry, yarn's cache inside the build (removed with it), a heap webpack's build fits in.
// The install may write yarn.lock (the module's copy of Grafana's source differs from its git
// tree), which yarn forbids by default when CI is set: allowed here, where a CI run builds.
var frontendEnv = []string{
	"CYPRESS_INSTALL_BINARY=0", "PUPPETEER_SKIP_DOWNLOAD=1", "PUPPETEER_SKIP_CHROMIUM_DOWNLOAD=1", "HUSKY=0",
	"YARN_ENABLE_TELEMETRY=0", "YARN_ENABLE_GLOBAL_CACHE=0", "YARN_ENABLE_PROGRESS_BARS=0",
	"YARN_ENABLE_IMMUTABLE_INSTALLS=false",
	"YARN_NPM_REGISTRY_SERVER=https://registry.npmjs.org",
	"NODE_OPTIONS=--max-old-space-size=8192", "GONOSUMDB=github.com/grafana", "GOFLAGS=-mod=mod",
}

// vendorFiles are public/vendor's files, which Go's module zips drop (every vendor/ directory),
// taken from the npm registry's packages: package@version -> file in the package -> file under
// public/vendor. Grafana's own copies are patched; these serve the Angular parts of the app
// berm's dashboards do not use, except bootstrap, which the app needs to start.
var vendorFiles = map[string]map[string]string{
	"jquery.flot@0.8.3": {
		"jquery.flot.js": "flot/jquery.flot.js", "jquery.flot.time.js": "flot/jquery.flot.time.js",
		"jquery.flot.selection.js": "flot/jquery.flot.selection.js", "jquery.flot.stack.js": "flot/jquery.flot.stack.js",
		"jquery.flot.crosshair.js": "flot/jquery.flot.crosshair.js",
	},
	"bootstrap2@2.3.2":          {"docs/assets/js/bootstrap.js": "bootstrap/bootstrap.js"},
	"bootstrap-tagsinput@0.7.1": {"dist/bootstrap-tagsinput.js": "tagsinput/bootstrap-tagsinput.js"},
}

// flotStubs are Grafana's own flot plugins, on npm nowhere: no-op plugins (only the deprecated
// graph and singlestat panels use them).
var flotStubs = []string{"stackpercent", "fillbelow", "dashes", "gauge"}

// webpackBerm wraps the development config: CopyWebpackPlugin is an ESM-only import the PnP
// CommonJS hook cannot load (its copy of Monaco is done by hand), and no source maps.
const webpackBerm = `'use strict';
const dev = require('./webpack.dev.js');
module.exports = (env = {}) => {
  const cfg = dev(env);
  cfg.plugins = cfg.plugins.filter((p) => !(p && p.constructor && p.constructor.name === 'CopyPlugin'));
  cfg.devtool = false;
  return cfg;
};
`

func buildFrontend(ctx context.Context, cache, dir string) error {
	logf, err := os.Create(filepath.Join(cache, "frontend-build.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	env := append(os.Environ(), frontendEnv...)
	run := func(wd string, args ...string) error {
		start := time.Now()
		fmt.Fprintf(logf, "+ (cd %s && %s)\n", wd, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = wd, env, logf, logf
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build grafana's frontend: %s: %w (log: %s)", strings.Join(args, " "), err, logf.Name())
		}
		fmt.Fprintf(logf, "  (%s)\n", time.Since(start).Round(time.Second))
		return nil
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	// the module's source (public/, package.json, yarn.lock, .yarn/releases)
	dl := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/grafana/grafana@"+Version)
	dl.Dir, dl.Env, dl.Stderr = tmp, env, logf
	out, err := dl.Output()
	if err != nil {
		return fmt.Errorf("go mod download grafana: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download grafana: no directory in %s: %v", out, err)
	}
	if err := run(tmp, "cp", "-r", mod.Dir, src); err != nil {
		return err
	}
	if err := run(tmp, "chmod", "-R", "u+w", src); err != nil {
		return err
	}
	// package.json takes xlsx from a CDN outside the npm registry: the registry's newest (only
	// the spreadsheet import uses it)
	pj := filepath.Join(src, "package.json")
	b, err := os.ReadFile(pj)
	if err != nil {
		return err
	}
	b = []byte(strings.Replace(string(b), `"xlsx": "https://cdn.sheetjs.com/xlsx-0.19.1/xlsx-0.19.1.tgz"`, `"xlsx": "0.18.5"`, 1))
	if err := os.WriteFile(pj, b, 0o644); err != nil {
		return err
	}
	releases, _ := filepath.Glob(filepath.Join(src, ".yarn", "releases", "yarn-*.cjs"))
	if len(releases) != 1 {
		return fmt.Errorf("build grafana's frontend: want one yarn release in the source, have %v", releases)
	}
	if err := run(src, "nice", "-n", "19", "node", releases[0], "install"); err != nil {
		return err
	}
	if err := vendor(ctx, run, tmp, src); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "scripts", "webpack", "webpack.berm.js"), []byte(webpackBerm), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "node", releases[0], "bin", "webpack")
	cmd.Dir, cmd.Env = src, env
	wp, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("yarn bin webpack: %w", err)
	}
	env = append(env, "NODE_ENV=dev")
	if err := run(src, "nice", "-n", "19", "node", "-r", "./.pnp.cjs", strings.TrimSpace(string(wp)),
		"--config", "scripts/webpack/webpack.berm.js", "--env", "noTsCheck=1"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(src, "public", "views", "index.html")); err != nil {
		return fmt.Errorf("build grafana's frontend: webpack wrote no index.html: %w (log: %s)", err, logf.Name())
	}
	// keep public/ only: the packages, yarn's cache and webpack's (about 1 GB) are not read again
	if err := os.Rename(filepath.Join(src, "public"), filepath.Join(tmp, "public")); err != nil {
		return err
	}
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "built"), []byte(Version+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// vendor fills public/vendor from the npm registry and public/lib/monaco from the installed
// packages (what CopyWebpackPlugin would copy).
func vendor(ctx context.Context, run func(string, ...string) error, tmp, src string) error {
	packs := filepath.Join(tmp, "vendor-npm")
	if err := os.MkdirAll(packs, 0o755); err != nil {
		return err
	}
	for pkg, files := range vendorFiles {
		name, _, _ := strings.Cut(pkg, "@")
		out := filepath.Join(packs, name)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := run(out, "npm", "pack", "--silent", "--registry=https://registry.npmjs.org", pkg); err != nil {
			return err
		}
		tgz, _ := filepath.Glob(filepath.Join(out, "*.tgz"))
		if len(tgz) != 1 {
			return fmt.Errorf("npm pack %s: %v", pkg, tgz)
		}
		if err := run(out, "tar", "-xzf", tgz[0]); err != nil {
			return err
		}
		for from, to := range files {
			b, err := os.ReadFile(filepath.Join(out, "package", from))
			if err != nil {
				return fmt.Errorf("vendor %s: %w", pkg, err)
			}
			dst := filepath.Join(src, "public", "vendor", to)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				return err
			}
		}
	}
	for _, p := range flotStubs {
		stub := fmt.Sprintf("// STUB: Grafana's jquery.flot.%s.js is neither in Grafana's Go module nor on npm.\n"+
			"(function ($) { $.plot.plugins.push({ init: function () {}, options: {}, name: '%s', version: 'stub' }); })(jQuery);\n", p, p)
		if err := os.WriteFile(filepath.Join(src, "public", "vendor", "flot", "jquery.flot."+p+".js"), []byte(stub), 0o644); err != nil {
			return err
		}
	}
	monaco := filepath.Join(tmp, "monaco")
	if err := os.MkdirAll(monaco, 0o755); err != nil {
		return err
	}
	for _, z := range []struct{ glob, inner string }{
		{"monaco-editor-npm-*.zip", "node_modules/monaco-editor/min/vs/*"},
		{"@kusto-monaco-kusto-npm-*.zip", "node_modules/@kusto/monaco-kusto/release/*"},
	} {
		zips, _ := filepath.Glob(filepath.Join(src, ".yarn", "cache", z.glob))
		if len(zips) != 1 {
			return fmt.Errorf("build grafana's frontend: want one %s in yarn's cache, have %v", z.glob, zips)
		}
		if err := run(monaco, "unzip", "-q", "-o", zips[0], z.inner); err != nil {
			return err
		}
	}
	vs := filepath.Join(src, "public", "lib", "monaco", "min", "vs")
	if err := os.MkdirAll(filepath.Join(vs, "language", "kusto"), 0o755); err != nil {
		return err
	}
	if err := run(tmp, "cp", "-r", filepath.Join(monaco, "node_modules/monaco-editor/min/vs")+"/.", vs+"/"); err != nil {
		return err
	}
	if err := run(tmp, "cp", "-r", filepath.Join(monaco, "node_modules/@kusto/monaco-kusto/release")+"/.", filepath.Join(vs, "language", "kusto")+"/"); err != nil {
		return err
	}
	return run(tmp, "find", filepath.Join(src, "public", "lib", "monaco"), "-name", "*.map", "-delete")
}
