-- Why each surface of a call was degraded (SurfaceState.Reason: the layer missing and the
-- rules it leaves unenforced, or the events lost), parallel to surfaces; empty otherwise.

ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN IF NOT EXISTS surface_reasons Array(String);
