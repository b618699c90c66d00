// Package dashboards holds berm's Grafana dashboards (the JSON files beside this one) and
// their provisioning; the datasource plugin they use is dashboards/plugin.
package dashboards

//go:generate go run ./internal/gendash

import "embed"

// Files are the dashboards' JSON files.
//
//go:embed *.json
var Files embed.FS
