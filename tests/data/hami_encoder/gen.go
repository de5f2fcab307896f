// Command gen writes ../hami_encoder.json: annotation values and text exactly as Go (and so HAMi) produces
// them. The structs below carry the JSON tags of HAMi's wire types as documented in
// shared/spec/scheduler-core.md §1.1, §1.9, §2.2, §2.3 and §2.6; the values are realistic nodes.
// The Python tests decode every value and assert that re-encoding gives the same bytes.
//
// Regenerate: cd tests/data/hami_encoder && go run gen.go
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

type placement struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

type migProfile struct {
	Name       string      `json:"name"`
	MemoryMB   int32       `json:"memoryMB"`
	Core       int32       `json:"core"`
	SliceCount uint32      `json:"sliceCount"`
	Placements []placement `json:"placements"`
}

type deviceInfo struct {
	ID          string       `json:"id,omitempty"`
	Index       uint         `json:"index,omitempty"`
	Count       int32        `json:"count,omitempty"`
	Devmem      int32        `json:"devmem,omitempty"`
	Devcore     int32        `json:"devcore,omitempty"`
	Type        string       `json:"type,omitempty"`
	Numa        int          `json:"numa,omitempty"`
	Mode        string       `json:"mode,omitempty"`
	MIGProfiles []migProfile `json:"migProfiles,omitempty"`
	Health      bool         `json:"health,omitempty"`
}

type pairScore struct {
	ID     string         `json:"uuid,omitempty"`
	Scores map[string]int `json:"score,omitempty"`
}

type migAllocation struct {
	ContainerIndex    int       `json:"containerIndex"`
	DeviceIndex       int       `json:"deviceIndex"`
	GPUUUID           string    `json:"gpuUUID"`
	Profile           string    `json:"profile"`
	Placement         placement `json:"placement"`
	MigUUID           string    `json:"migUUID,omitempty"`
	GPUInstanceID     *uint32   `json:"gpuInstanceID,omitempty"`
	ComputeInstanceID *uint32   `json:"computeInstanceID,omitempty"`
}

func marshal(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

func places(size uint32, starts ...uint32) []placement {
	out := []placement{}
	for _, s := range starts {
		out = append(out, placement{Start: s, Size: size})
	}
	return out
}

func a100Profiles() []migProfile {
	return []migProfile{
		{Name: "1g.5gb", MemoryMB: 4864, Core: 15, SliceCount: 1, Placements: places(1, 0, 1, 2, 3, 4, 5, 6)},
		{Name: "1g.10gb", MemoryMB: 9856, Core: 15, SliceCount: 1, Placements: places(2, 0, 2, 4, 6)},
		{Name: "2g.10gb", MemoryMB: 9856, Core: 29, SliceCount: 2, Placements: places(2, 0, 2, 4)},
		{Name: "3g.20gb", MemoryMB: 19968, Core: 43, SliceCount: 3, Placements: places(4, 0, 4)},
		{Name: "4g.20gb", MemoryMB: 19968, Core: 58, SliceCount: 4, Placements: places(4, 0)},
		{Name: "7g.40gb", MemoryMB: 40192, Core: 100, SliceCount: 7, Placements: places(8, 0)},
	}
}

func u32(v uint32) *uint32 { return &v }

func main() {
	uuids := []string{
		"GPU-6f3c1a2e-8b4d-4c1f-9e2a-0d5b7c8e9f01", "GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
		"GPU-9e8d7c6b-5a4f-4e3d-2c1b-0a9f8e7d6c5b", "GPU-0f1e2d3c-4b5a-4968-8776-655443322110",
		"GPU-a1b2c3d4-e5f6-4a1b-8c2d-3e4f5a6b7c8d", "GPU-b2c3d4e5-f6a7-4b2c-9d3e-4f5a6b7c8d9e",
		"GPU-c3d4e5f6-a7b8-4c3d-8e4f-5a6b7c8d9e0f", "GPU-d4e5f6a7-b8c9-4d4e-9f5a-6b7c8d9e0f1a",
	}
	var a100 []deviceInfo
	for i, id := range uuids {
		a100 = append(a100, deviceInfo{
			ID: id, Index: uint(i), Count: 10, Devmem: 40960, Devcore: 100, Type: "NVIDIA A100-SXM4-40GB",
			Numa: i / 4, Mode: "hami-core", Health: i != 5, // one unhealthy GPU: health is then omitted
		})
	}
	mig := []deviceInfo{
		{ID: "GPU-7b1f0c52-3d9e-4a86-b0c4-2f6e8d1a9c37", Count: 7, Devmem: 40960, Devcore: 100,
			Type: "NVIDIA A100-SXM4-40GB", Mode: "mig", MIGProfiles: a100Profiles(), Health: true},
		{ID: "GPU-2c8e4a10-6f3b-4d5c-9a7e-1b0d3f5e7a92", Index: 1, Count: 10, Devmem: 40960, Devcore: 100,
			Type: "NVIDIA A100-SXM4-40GB", Numa: 1, Mode: "hami-core", Health: true},
		{ID: "GPU-edge", Index: 2, Count: 7, Devmem: 40960, Devcore: 100, Type: "NVIDIA A100-SXM4-40GB",
			Mode: "mig", MIGProfiles: []migProfile{{Name: "7g.40gb", MemoryMB: 40192, Core: 100, SliceCount: 7,
				Placements: []placement{}}}, Health: true},
	}
	strange := []deviceInfo{
		{ID: "GPU-<x>&\"y\"\\", Count: -1, Devmem: 2147483647, Devcore: -2147483648, Type: "NVIDIA-Tesla T4 \u00e9\u4e2d\U0001F600",
			Numa: -1, Mode: "ctl\x00\x01\b\f\n\r\t\x1f\x7f\u2028\u2029", Health: true},
		{Index: 18446744073709551615, Numa: 9223372036854775807},
		{},
	}
	twoT4 := []deviceInfo{
		{ID: "GPU-0a1", Count: 10, Devmem: 15360, Devcore: 100, Type: "NVIDIA-Tesla T4", Mode: "hami-core", Health: true},
		{ID: "GPU-0a2", Index: 1, Count: 10, Devmem: 15360, Devcore: 100, Type: "NVIDIA-Tesla T4", Numa: 1, Mode: "hami-core", Health: true},
	}

	scores := []pairScore{}
	for i, a := range uuids {
		m := map[string]int{}
		for j := len(uuids) - 1; j >= 0; j-- {
			if i == j {
				continue
			}
			switch {
			case i/4 == j/4:
				m[uuids[j]] = 1200 // 12 NVLinks
			default:
				m[uuids[j]] = 10
			}
		}
		scores = append(scores, pairScore{ID: a, Scores: m})
	}
	scores = append(scores, pairScore{ID: "GPU-lonely"}, pairScore{Scores: map[string]int{"<b>": -1, "a": 0}})

	migAllocs := []migAllocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: mig[0].ID, Profile: "3g.20gb", Placement: placement{4, 4}},
		{ContainerIndex: 1, DeviceIndex: 0, GPUUUID: mig[0].ID, Profile: "2g.10gb", Placement: placement{0, 2}},
		{ContainerIndex: 1, DeviceIndex: 1, GPUUUID: mig[0].ID, Profile: "1g.5gb", Placement: placement{3, 1}},
	}
	migReady := []migAllocation{
		{ContainerIndex: 0, DeviceIndex: 0, GPUUUID: mig[0].ID, Profile: "1g.5gb", Placement: placement{6, 1},
			MigUUID: "MIG-3f2a1b0c-9d8e-5f7a-b6c5-d4e3f2a1b0c9", GPUInstanceID: u32(0), ComputeInstanceID: u32(0)},
		{ContainerIndex: 2, DeviceIndex: 0, GPUUUID: mig[0].ID, Profile: "3g.20gb", Placement: placement{4, 4},
			MigUUID: "MIG-aa", GPUInstanceID: u32(4294967295), ComputeInstanceID: u32(7)},
	}

	cst := time.FixedZone("CST", 8*3600)
	ist := time.FixedZone("IST", 5*3600+1800)
	nst := time.FixedZone("NST", -(3*3600 + 1800))
	moments := map[string]time.Time{
		"utc":           time.Date(2026, 8, 21, 6, 20, 39, 0, time.UTC),
		"plus_two":      time.Date(2026, 8, 21, 8, 20, 39, 0, time.FixedZone("CEST", 2*3600)),
		"cst_nanos":     time.Date(2024, 5, 1, 10, 0, 0, 123456789, cst),
		"ist":           time.Date(2025, 6, 13, 9, 7, 40, 0, ist),
		"newfoundland":  time.Date(1999, 12, 31, 23, 59, 59, 0, nst),
		"year_five":     time.Date(5, 1, 2, 3, 4, 5, 0, time.UTC),
		"leap_day":      time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		"negative_unix": time.Date(1969, 12, 31, 23, 59, 59, 500000000, time.UTC),
	}
	rfc3339 := map[string]string{}
	datetime := map[string]string{}
	goString := map[string]string{}
	unix := map[string]string{}
	for name, t := range moments {
		rfc3339[name] = t.Format(time.RFC3339)
		datetime[name] = t.Format(time.DateTime)
		goString[name] = t.String()
		unix[name] = strconv.FormatInt(t.Unix(), 10)
	}

	durations := map[string]string{}
	for _, d := range []time.Duration{0, 5 * time.Minute, 28 * time.Second, time.Hour, 1500 * time.Millisecond,
		100 * time.Millisecond, 500 * time.Microsecond, 90 * time.Minute, 26*time.Hour + 3*time.Second + 250*time.Millisecond,
		-2 * time.Second, 1234567 * time.Microsecond} {
		durations[strconv.FormatInt(d.Microseconds(), 10)] = d.String()
	}

	floats := map[string]string{}
	for _, f := range []float32{0, 8, 11.75, 16, 27, 0.125, 0.375, 2.675, 1.005, 1.0 / 3, 7.5, 99.995, 1e7 / 3, -0.0} {
		floats[strconv.FormatFloat(float64(f), 'g', -1, 64)] = fmt.Sprintf("%.2f", f)
	}

	quotes := map[string]string{}
	for _, s := range []string{"plain", "with \"quote\" and \\", "tab\tnl\nnul\x00bell\a", "é中\U0001F600", "\u00a0nbsp\u200b\u2028", "\x7f\x1b"} {
		quotes[s] = strconv.Quote(s)
	}

	out := map[string]any{
		"register": map[string]string{
			"a100_8gpu_numa": marshal(a100),
			"mig_node":       marshal(mig),
			"two_t4":         marshal(twoT4),
			"strange_values": marshal(strange),
			"empty":          marshal([]deviceInfo{}),
		},
		"score":           map[string]string{"a100_8gpu_numa": marshal(scores)},
		"mig_allocations": map[string]string{"reserved": marshal(migAllocs), "runtime_ready": marshal(migReady)},
		"rfc3339":         rfc3339,
		"datetime":        datetime,
		"go_time_string":  goString,
		"unix":            unix,
		"duration_by_us":  durations,
		"fixed2_float32":  floats,
		"quote":           quotes,
	}
	f, err := os.Create("../hami_encoder.json")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
