package streamjson

import (
	"encoding/json"
	"math/bits"
	"slices"
	"strings"

	"github.com/cbc-otel/cbc-otel/safetext"
)

// MaxResultModels bounds a result line's models (a session uses one to three):
// those beyond, in name order so every line keeps the same, are bad fields.
const MaxResultModels = 16

// maxCostUSD is the largest cost taken as a session's: more is garbage.
const maxCostUSD = 1e6

// modelNums are a modelUsage entry's numbers: the counts in Tokens order,
// then the cost (mCost).
var modelNums = [...]string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "costUSD"}

// Bits of ResultModel.Known, those of cost.Known: KnownTokens<<k for
// Tokens[k], KnownCost for CostUSD.
const (
	mCost             = len(modelNums) - 1
	KnownTokens uint8 = 1
	KnownCost   uint8 = 1 << mCost
	KnownAll          = KnownCost<<1 - 1
)

// wireModel is one modelUsage entry as read, before it is checked.
type wireModel struct {
	name   string // the key, unescaped
	notObj bool   // the entry is not an object
	num    [len(modelNums)]float64
	set    uint8 // 1<<k: modelNums[k] was a number
	bad    uint8 // 1<<k: modelNums[k] of another type
}

// plainModels reads modelUsage on the plain path into d.w.models; false
// when it is not an object.
func (d *Decoder) plainModels(raw []byte) bool {
	var models map[string]json.RawMessage
	if plainObject(raw, &models) != nil {
		return false
	}
	for name, entry := range models {
		m := wireModel{name: name}
		if plainObject(entry, &d.sub) != nil {
			m.notObj = true
		} else {
			for k, field := range modelNums {
				v, found := d.sub[field]
				if f, ok := memberNum(d.sub, field); !ok {
					m.bad |= 1 << k
				} else if found && !isNull(v) {
					m.num[k], m.set = f, m.set|1<<k
				}
			}
		}
		d.w.models = append(d.w.models, m)
	}
	return true
}

// result completes a result event from what either path read into d.w.
// Models are taken in name order, so every line keeps the same ones.
func (d *Decoder) result(ev *Event) {
	w := &d.w
	ev.SessionID = cleanID(w.str[fSessionID])
	ev.ResultSubtype = safetext.Clean(w.str[fSubtype], maxIDLen)
	ev.IsError = w.isError
	ev.DurationMs = count(w.durationMs, &ev.BadFields)
	if w.costSet {
		ev.TotalCostUSD, ev.HasCost = costOf(w.cost, &ev.BadFields)
	}
	slices.SortFunc(w.models, func(a, b wireModel) int { return strings.Compare(a.name, b.name) })
	for i := range w.models {
		wm := &w.models[i]
		m := ResultModel{Model: cleanID(wm.name)}
		dup := slices.ContainsFunc(ev.Models, func(o ResultModel) bool { return o.Model == m.Model })
		if len(ev.Models) == MaxResultModels || m.Model == "" || dup || wm.notObj {
			ev.BadFields++
			continue
		}
		// A value absent, null, bad or out of range is unknown (Known),
		// never 0: a 0 would read as a cumulative value gone down, a
		// session reset (see cost.Sessions).
		ev.BadFields += bits.OnesCount8(wm.bad)
		for k := range modelNums {
			before := ev.BadFields
			switch {
			case wm.set&(1<<k) == 0:
				continue
			case k == mCost:
				m.CostUSD, _ = costOf(wm.num[k], &ev.BadFields)
			default:
				m.Tokens[k] = count(wm.num[k], &ev.BadFields)
			}
			if ev.BadFields == before {
				m.Known |= 1 << k
			}
		}
		ev.Models = append(ev.Models, m)
	}
}

// costOf checks a cost in USD: a number in [0, maxCostUSD]; otherwise it
// counts in *bad and reads 0.
func costOf(usd float64, bad *int) (float64, bool) {
	if usd < 0 || usd > maxCostUSD {
		*bad++
		return 0, false
	}
	return usd, true
}
