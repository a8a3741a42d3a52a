package mig

// The geometry tables below are data facts transcribed from the reference
// geometry, mig/profiles.json of the project's shared data (docs/traces.md).
// TestGeometryMatchesJSON keeps them equal to that file where it is present.
//
// Placement sizes are implied: every placement of a profile spans
// memSlices memory slices, which the JSON confirms for every row.

var modelTable = [...]modelData{
	{}, // index 0: no model (not MIG-capable)
	{
		name:          "A100-40GB",
		aliases:       []string{"A100-SXM4-40GB", "A100-PCIE-40GB"},
		pciDeviceIDs:  []uint32{0x20B010DE, 0x20F110DE},
		computeSlices: 7,
		memorySlices:  8,
		resetToToggle: true,
		minDriver:     "R450 (>= 450.80.02)",
		profiles: []profileData{
			{name: "1g.5gb", computeSlices: 1, memSlices: 1, memoryGiB: 5, maxCount: 7, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: 19, mediaExtensions: false, placementsConfidence: "high"},
			{name: "1g.5gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 5, maxCount: 1, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: 20, mediaExtensions: true, placementsConfidence: "high"},
			{name: "1g.10gb", computeSlices: 1, memSlices: 2, memoryGiB: 10, maxCount: 4, starts: []uint8{0, 2, 4, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV2", driverProfileID: 15, mediaExtensions: false, placementsConfidence: "high"},
			{name: "2g.10gb", computeSlices: 2, memSlices: 2, memoryGiB: 10, maxCount: 3, starts: []uint8{0, 2, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: 14, mediaExtensions: false, placementsConfidence: "high"},
			{name: "3g.20gb", computeSlices: 3, memSlices: 4, memoryGiB: 20, maxCount: 2, starts: []uint8{0, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_3_SLICE", driverProfileID: 9, mediaExtensions: false, placementsConfidence: "high"},
			{name: "4g.20gb", computeSlices: 4, memSlices: 4, memoryGiB: 20, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: 5, mediaExtensions: false, placementsConfidence: "high"},
			{name: "7g.40gb", computeSlices: 7, memSlices: 8, memoryGiB: 40, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_7_SLICE", driverProfileID: 0, mediaExtensions: false, placementsConfidence: "high"},
		},
	},
	{
		name:          "A100-80GB",
		aliases:       []string{"A100-SXM4-80GB", "A100-PCIE-80GB"},
		pciDeviceIDs:  []uint32{0x20B210DE, 0x20B510DE},
		computeSlices: 7,
		memorySlices:  8,
		resetToToggle: true,
		minDriver:     "R450 (>= 450.80.02)",
		profiles: []profileData{
			{name: "1g.10gb", computeSlices: 1, memSlices: 1, memoryGiB: 10, maxCount: 7, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: 19, mediaExtensions: false, placementsConfidence: "high"},
			{name: "1g.10gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 10, maxCount: 1, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: 20, mediaExtensions: true, placementsConfidence: "high"},
			{name: "1g.20gb", computeSlices: 1, memSlices: 2, memoryGiB: 20, maxCount: 4, starts: []uint8{0, 2, 4, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV2", driverProfileID: 15, mediaExtensions: false, placementsConfidence: "high"},
			{name: "2g.20gb", computeSlices: 2, memSlices: 2, memoryGiB: 20, maxCount: 3, starts: []uint8{0, 2, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: 14, mediaExtensions: false, placementsConfidence: "high"},
			{name: "3g.40gb", computeSlices: 3, memSlices: 4, memoryGiB: 40, maxCount: 2, starts: []uint8{0, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_3_SLICE", driverProfileID: 9, mediaExtensions: false, placementsConfidence: "high"},
			{name: "4g.40gb", computeSlices: 4, memSlices: 4, memoryGiB: 40, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: 5, mediaExtensions: false, placementsConfidence: "high"},
			{name: "7g.80gb", computeSlices: 7, memSlices: 8, memoryGiB: 80, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_7_SLICE", driverProfileID: 0, mediaExtensions: false, placementsConfidence: "high"},
		},
	},
	{
		name:          "H100-80GB",
		aliases:       []string{"H100-SXM5-80GB", "H100-PCIE-80GB", "H800-80GB"},
		pciDeviceIDs:  []uint32{0x233010DE, 0x233110DE},
		computeSlices: 7,
		memorySlices:  8,
		resetToToggle: false,
		minDriver:     "R525 (>= 525.85.12)",
		profiles: []profileData{
			{name: "1g.10gb", computeSlices: 1, memSlices: 1, memoryGiB: 10, maxCount: 7, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: 19, mediaExtensions: false, placementsConfidence: "high"},
			{name: "1g.10gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 10, maxCount: 1, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: 20, mediaExtensions: true, placementsConfidence: "high"},
			{name: "1g.20gb", computeSlices: 1, memSlices: 2, memoryGiB: 20, maxCount: 4, starts: []uint8{0, 2, 4, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV2", driverProfileID: 15, mediaExtensions: false, placementsConfidence: "high"},
			{name: "2g.20gb", computeSlices: 2, memSlices: 2, memoryGiB: 20, maxCount: 3, starts: []uint8{0, 2, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: 14, mediaExtensions: false, placementsConfidence: "high"},
			{name: "3g.40gb", computeSlices: 3, memSlices: 4, memoryGiB: 40, maxCount: 2, starts: []uint8{0, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_3_SLICE", driverProfileID: 9, mediaExtensions: false, placementsConfidence: "high"},
			{name: "4g.40gb", computeSlices: 4, memSlices: 4, memoryGiB: 40, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: 5, mediaExtensions: false, placementsConfidence: "high"},
			{name: "7g.80gb", computeSlices: 7, memSlices: 8, memoryGiB: 80, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_7_SLICE", driverProfileID: 0, mediaExtensions: false, placementsConfidence: "high"},
		},
	},
	{
		name:          "H200-141GB",
		aliases:       []string{"H200-SXM5-141GB", "H200 NVL"},
		pciDeviceIDs:  []uint32{0x233510DE, 0x233B10DE},
		computeSlices: 7,
		memorySlices:  8,
		resetToToggle: false,
		minDriver:     "R550 (>= 550.90.07)",
		profiles: []profileData{
			{name: "1g.18gb", computeSlices: 1, memSlices: 1, memoryGiB: 18, maxCount: 7, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: 19, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "1g.18gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 18, maxCount: 1, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: 20, mediaExtensions: true, placementsConfidence: "medium"},
			{name: "1g.35gb", computeSlices: 1, memSlices: 2, memoryGiB: 35, maxCount: 4, starts: []uint8{0, 2, 4, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV2", driverProfileID: 15, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "2g.35gb", computeSlices: 2, memSlices: 2, memoryGiB: 35, maxCount: 3, starts: []uint8{0, 2, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: 14, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "3g.71gb", computeSlices: 3, memSlices: 4, memoryGiB: 71, maxCount: 2, starts: []uint8{0, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_3_SLICE", driverProfileID: 9, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "4g.71gb", computeSlices: 4, memSlices: 4, memoryGiB: 71, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: 5, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "7g.141gb", computeSlices: 7, memSlices: 8, memoryGiB: 141, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_7_SLICE", driverProfileID: 0, mediaExtensions: false, placementsConfidence: "medium"},
		},
	},
	{
		name:          "B200-180GB",
		aliases:       []string{"B200"},
		pciDeviceIDs:  []uint32{0x290110DE},
		computeSlices: 7,
		memorySlices:  8,
		resetToToggle: false,
		minDriver:     "R570 (>= 570.133.20)",
		profiles: []profileData{
			{name: "1g.23gb", computeSlices: 1, memSlices: 1, memoryGiB: 23, maxCount: 7, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "1g.23gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 23, maxCount: 1, starts: []uint8{0, 1, 2, 3, 4, 5, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: -1, mediaExtensions: true, placementsConfidence: "medium"},
			{name: "1g.45gb", computeSlices: 1, memSlices: 2, memoryGiB: 45, maxCount: 4, starts: []uint8{0, 2, 4, 6}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV2", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "2g.45gb", computeSlices: 2, memSlices: 2, memoryGiB: 45, maxCount: 3, starts: []uint8{0, 2, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "3g.90gb", computeSlices: 3, memSlices: 4, memoryGiB: 90, maxCount: 2, starts: []uint8{0, 4}, nvmlProfile: "GPU_INSTANCE_PROFILE_3_SLICE", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "4g.90gb", computeSlices: 4, memSlices: 4, memoryGiB: 90, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
			{name: "7g.180gb", computeSlices: 7, memSlices: 8, memoryGiB: 180, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_7_SLICE", driverProfileID: -1, mediaExtensions: false, placementsConfidence: "medium"},
		},
	},
	{
		name:          "A30-24GB",
		aliases:       []string{"A30"},
		pciDeviceIDs:  []uint32{0x20B710DE},
		computeSlices: 4,
		memorySlices:  4,
		resetToToggle: true,
		minDriver:     "R460 (>= 460.73.01)",
		profiles: []profileData{
			{name: "1g.6gb", computeSlices: 1, memSlices: 1, memoryGiB: 6, maxCount: 4, starts: []uint8{0, 1, 2, 3}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE", driverProfileID: 14, mediaExtensions: false, placementsConfidence: "high"},
			{name: "1g.6gb+me", computeSlices: 1, memSlices: 1, memoryGiB: 6, maxCount: 1, starts: []uint8{0, 1, 2, 3}, nvmlProfile: "GPU_INSTANCE_PROFILE_1_SLICE_REV1", driverProfileID: 21, mediaExtensions: true, placementsConfidence: "high"},
			{name: "2g.12gb", computeSlices: 2, memSlices: 2, memoryGiB: 12, maxCount: 2, starts: []uint8{0, 2}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE", driverProfileID: 5, mediaExtensions: false, placementsConfidence: "high"},
			{name: "2g.12gb+me", computeSlices: 2, memSlices: 2, memoryGiB: 12, maxCount: 1, starts: []uint8{0, 2}, nvmlProfile: "GPU_INSTANCE_PROFILE_2_SLICE_REV1", driverProfileID: 6, mediaExtensions: true, placementsConfidence: "high"},
			{name: "4g.24gb", computeSlices: 4, memSlices: 4, memoryGiB: 24, maxCount: 1, starts: []uint8{0}, nvmlProfile: "GPU_INSTANCE_PROFILE_4_SLICE", driverProfileID: 0, mediaExtensions: false, placementsConfidence: "high"},
		},
	},
}
