package streamjson

// The decoder's bounds on the text it keeps, in bytes: a Tracker restoring
// a checkpoint (input too) cleans each field to the bound the decoder
// would have, so that every text reaching a sink through ingest is clean.
const (
	MaxIDLen      = maxIDLen      // ids, task types, statuses, reasons, model names
	MaxNameLen    = maxNameLen    // workflow names, phase titles, agent labels
	MaxTextLen    = maxTextLen    // descriptions, error texts
	MaxPreviewLen = maxPreviewLen // summaries, prompt and result previews
)
