// berm-datasource is the backend of berm's Grafana datasource plugin: Grafana starts it and
// talks to it over gRPC (see dashboards/README.md to install it).
package main

import (
	"log/slog"
	"os"

	"github.com/grafana/grafana-plugin-sdk-go/backend/datasource"

	"github.com/bermsec/berm/dashboards/plugin"
)

func main() {
	if err := datasource.Manage(plugin.ID, plugin.NewDatasource, datasource.ManageOpts{}); err != nil {
		slog.Error("berm-datasource", "err", err)
		os.Exit(1)
	}
}
