package driver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/s3csi/s3-csi-driver/pkg/s3"
)

// nonZeroSeries gathers the controller's metrics: each counter series that is not 0 by
// name{labels}, and each histogram's observation count as name_count{labels}.
func nonZeroSeries(t *testing.T, cs *ControllerServer) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				if v := m.GetCounter().GetValue(); v != 0 {
					got[f.GetName()+key] = v
				}
			case dto.MetricType_HISTOGRAM:
				if n := m.GetHistogram().GetSampleCount(); n != 0 {
					got[f.GetName()+"_count"+key] = float64(n)
				}
			default:
				t.Errorf("unexpected metric type %v of %s", f.GetType(), f.GetName())
			}
		}
	}
	return got
}

// TestControllerMetrics: each CreateVolume and DeleteVolume is counted once by its result, a
// failure also by the gRPC code the caller gets (the same as the interceptor's), and timed.
func TestControllerMetrics(t *testing.T) {
	create := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: rwx}
	mine := s3.Owner{VolumeName: "pvc-1", VolumeID: "v1:delete:pvc-1"}
	for _, tc := range []struct {
		name   string
		create *csi.CreateVolumeRequest
		delete string // a volume id; empty: CreateVolume
		result s3.CreateResult
		owner  s3.Owner
		errs   map[string]error
		want   map[string]float64
	}{
		{name: "bucket created", create: create, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=create,result=created}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=create}`:                1,
		}},
		{name: "retried create", create: create, result: s3.Existing, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=create,result=existing}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=create}`:                 1,
		}},
		{name: "create refused by S3", create: create, errs: map[string]error{"CreateBucket": fmt.Errorf("x: %w", s3.ErrAccessDenied)}, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=create,result=failed}`: 1,
			`s3csi_csi_controller_errors_total{code=PermissionDenied,operation=create}`:    1,
			`s3csi_csi_controller_operation_seconds_count{operation=create}`:               1,
		}},
		{name: "invalid create", create: &csi.CreateVolumeRequest{VolumeCapabilities: rwx}, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=create,result=failed}`: 1,
			`s3csi_csi_controller_errors_total{code=InvalidArgument,operation=create}`:     1,
			`s3csi_csi_controller_operation_seconds_count{operation=create}`:               1,
		}},
		{name: "bucket deleted", delete: "v1:delete:pvc-1", owner: mine, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=delete,result=deleted}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=delete}`:                1,
		}},
		{name: "bucket retained", delete: "v1:retain:pvc-1", want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=delete,result=retained}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=delete}`:                 1,
		}},
		{name: "bucket already gone", delete: "v1:delete:pvc-1", errs: map[string]error{"BucketOwner": fmt.Errorf("x: %w", s3.ErrNoSuchBucket)}, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=delete,result=absent}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=delete}`:               1,
		}},
		{name: "1.x bucket deleted", delete: legacy1x, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=delete,result=deleted}`: 1,
			`s3csi_csi_controller_operation_seconds_count{operation=delete}`:                1,
		}},
		{name: "store unavailable", delete: "v1:delete:pvc-1", owner: mine, errs: map[string]error{"DeleteBucket": fmt.Errorf("x: %w", s3.ErrUnavailable)}, want: map[string]float64{
			`s3csi_csi_controller_bucket_operations_total{operation=delete,result=failed}`: 1,
			`s3csi_csi_controller_errors_total{code=Unavailable,operation=delete}`:         1,
			`s3csi_csi_controller_operation_seconds_count{operation=delete}`:               1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, fake, _ := newTestController(t, ctrlCreds)
			fake.result, fake.owner, fake.errs = tc.result, tc.owner, tc.errs
			var err error
			if tc.delete != "" {
				_, err = cs.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: tc.delete})
			} else {
				_, err = cs.CreateVolume(context.Background(), tc.create)
			}
			if failed := tc.want["s3csi_csi_controller_bucket_operations_total{operation="+opOf(tc.delete)+",result=failed}"] == 1; failed != (err != nil) {
				t.Fatalf("error %v, want failure %v", err, failed)
			}
			if d := cmp.Diff(tc.want, nonZeroSeries(t, cs)); d != "" {
				t.Errorf("metrics (-want +got):\n%s", d)
			}
		})
	}
}

func opOf(deleteID string) string {
	if deleteID != "" {
		return opDelete
	}
	return opCreate
}

// TestControllerMetricsFromStart: every operation, result and error code series is exported at 0 before
// the first call, so that rates and alerts need no special case for one not seen yet.
func TestControllerMetricsFromStart(t *testing.T) {
	cs, _, _ := newTestController(t, ctrlCreds)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range families {
		got[f.GetName()] = len(f.GetMetric())
	}
	want := map[string]int{
		"s3csi_csi_controller_bucket_operations_total": 8, // 4 results of create, 4 of delete
		"s3csi_csi_controller_operation_seconds":       2,
		"s3csi_csi_controller_errors_total":            2 * len(controllerCodes),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("series at start (-want +got):\n%s", d)
	}
}
