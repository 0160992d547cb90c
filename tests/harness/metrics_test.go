package harness

import "testing"

func TestMetricSum(t *testing.T) {
	text := `# HELP s3csi_node_mounts Live mounts.
# TYPE s3csi_node_mounts gauge
s3csi_node_mounts{mode="legacy",node="n1"} 2
s3csi_node_mounts{mode="pod",node="n1"} 3
s3csi_node_mounts_other{mode="pod",node="n1"} 100
up 1
`
	for _, tc := range []struct {
		name   string
		labels []string
		sum    float64
		n      int
	}{
		{"s3csi_node_mounts", nil, 5, 2},
		{"s3csi_node_mounts", []string{`mode="legacy"`}, 2, 1},
		{"s3csi_node_mounts", []string{`mode="pod"`, `node="n1"`}, 3, 1},
		{"s3csi_node_mounts", []string{`mode="po"`}, 0, 0},
		{"s3csi_node_mounts", []string{`node="n2"`}, 0, 0},
		{"up", nil, 1, 1},
	} {
		if sum, n := MetricSum(text, tc.name, tc.labels...); sum != tc.sum || n != tc.n {
			t.Errorf("MetricSum(%s, %v) = %v, %d; want %v, %d", tc.name, tc.labels, sum, n, tc.sum, tc.n)
		}
	}
}
