package driver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3-csi-driver/pkg/s3"
)

// The operations the controller metrics are labelled with, and their results besides the
// s3.CreateResult values of a create.
const (
	opCreate = "create"
	opDelete = "delete"

	resultFailed = "failed"
	// resultDeleted: the bucket was deleted by this call.
	resultDeleted = "deleted"
	// resultRetained: the volume's bucketDeletionPolicy is retain; the bucket is kept.
	resultRetained = "retained"
	// resultAbsent: nothing to delete (the bucket is already gone, or the volume is static).
	resultAbsent = "absent"
)

// operationResults are the results each operation can record, so that every series exists at
// 0 from start-up.
var operationResults = map[string][]string{
	opCreate: {string(s3.Created), string(s3.Existing), string(s3.Adopted), resultFailed},
	opDelete: {resultDeleted, resultRetained, resultAbsent, resultFailed},
}

// controllerCodes are the gRPC codes a CreateVolume or DeleteVolume can end with (codeOf),
// whose error series exist at 0 from start-up.
var controllerCodes = []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied,
	codes.Unavailable, codes.Aborted, codes.AlreadyExists, codes.NotFound, codes.DeadlineExceeded,
	codes.Canceled, codes.Internal}

// controllerMetrics are the Controller service's Prometheus metrics (docs/monitoring.md). They
// have no registry of their own: main registers ControllerServer.Collectors where it serves
// them.
type controllerMetrics struct {
	operations *prometheus.CounterVec
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
}

func newControllerMetrics() *controllerMetrics {
	m := &controllerMetrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s3csi_csi_controller_bucket_operations_total",
			Help: "CreateVolume and DeleteVolume calls of the CSI controller by operation (create, delete) and result: created, existing (a retry), adopted (a bucket left by an interrupted create) or failed; deleted, retained (bucketDeletionPolicy retain), absent (already gone, or not a provisioned volume) or failed."},
			[]string{"operation", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "s3csi_csi_controller_errors_total",
			Help: "Failed CreateVolume and DeleteVolume calls of the CSI controller by operation and the gRPC code the caller got."},
			[]string{"operation", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "s3csi_csi_controller_operation_seconds",
			Help:    "Duration of the CSI controller's CreateVolume and DeleteVolume calls (a deleteWithObjects deletion spends up to --empty-bucket-budget emptying the bucket).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}},
			[]string{"operation"}),
	}
	for op, results := range operationResults {
		m.duration.WithLabelValues(op)
		for _, c := range controllerCodes {
			m.errors.WithLabelValues(op, c.String())
		}
		for _, r := range results {
			m.operations.WithLabelValues(op, r)
		}
	}
	return m
}

// observe records one operation that started at start, ended with err and, when err is nil,
// had result.
func (m *controllerMetrics) observe(op string, start time.Time, result string, err error) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.operations.WithLabelValues(op, resultFailed).Inc()
		m.errors.WithLabelValues(op, codeName(err)).Inc()
		return
	}
	m.operations.WithLabelValues(op, result).Inc()
}

// codeName is the name of the gRPC code the interceptor gives err (codes.Code.String, e.g.
// Unavailable).
func codeName(err error) string {
	if c := codeOf(err); c != codes.OK {
		return c.String()
	}
	return codes.Unknown.String()
}

func (m *controllerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.operations, m.errors, m.duration}
}
