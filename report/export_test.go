package report

// MsText is msText for the external tests: they check which duration the
// waterfall prints, not how it formats one.
var MsText = msText
