// Package streamjson reads the wire format of a stream-json session: it
// decodes the lines of interest (system/task_*, system/init, result,
// control_request and control_response) into Events, leaving every other
// line undecoded; the cheap prefilter (Interesting, LongLineOfInterest)
// says which lines those may be. Framing bytes into lines is package
// ndjson's, cleaning the text it keeps package safetext's. Two decoding paths give the same result: a scanner that
// touches each byte once and reuses unchanged snapshot rows, and a plain
// path on encoding/json that the fuzz targets compare it with.
//
// It judges lines, not workflows: what an event means for a run is the
// Tracker's (package ingest).
package streamjson
