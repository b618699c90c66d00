-- The six surfaces of each call (CallRecord.Surfaces) as parallel arrays, one element per
-- surface in event.Surfaces order: ARRAY JOIN gives one row per call and surface, which is
-- what the tools x surfaces matrix groups (collector/query). 18.16 has no Map; a column per
-- surface would make every query name all six. violated is surface_violations > 0.

ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN surfaces Array(String);
ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN surface_states Array(String);
ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN surface_layers Array(Array(String));
ALTER TABLE {{.Alter "calls"}}{{.OnCluster}} ADD COLUMN surface_violations Array(UInt64);
