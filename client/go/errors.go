package kubefanout

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reasonTooLarge is the ErrorInfo reason kube-fanout gives when it could not
// catch up with an asked resourceVersion in time.
const reasonTooLarge = "TooLargeResourceVersion"

// reasonForbidden is the ErrorInfo reason of a refusal by the API server's
// authorization; its metadata names the group, resource and name refused.
const reasonForbidden = "Forbidden"

// reasonShuttingDown is the ErrorInfo reason of a watch ended because its
// server is shutting down.
const reasonShuttingDown = "ShuttingDown"

// reasonRetired is the ErrorInfo reason of a watch ended because its
// connection reached kube-fanout's maximum connection age.
const reasonRetired = "ConnectionRetired"

// statusError turns a kube-fanout gRPC status into the *apierrors.StatusError
// the API server would have answered, so client-go's reflector takes the
// same decision it takes against the API server. This is the one place
// where statuses are mapped.
//
//   - OUT_OF_RANGE (reason Expired): 410 Expired; the reflector relists.
//   - DEADLINE_EXCEEDED with reason TooLargeResourceVersion: a timeout with
//     the ResourceVersionTooLarge cause; the reflector relists at "".
//   - RESOURCE_EXHAUSTED (a lagging subscriber), UNAVAILABLE (a server not
//     synced yet, or none reachable within the reconnect wait): 429; the
//     reflector backs off and watches again from its last resourceVersion,
//     without relisting, which is exactly a resume. (A watch whose server
//     shuts down or whose connection breaks ends cleanly instead: see the
//     watcher's pump.)
//   - PERMISSION_DENIED: 403 Forbidden with the server's message, which is
//     the API server's own text for the same refusal.
//   - the rest as the API server maps the same faults.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewInternalError(err)
	}
	msg := "kube-fanout: " + st.Message()
	reason, rv := errorInfo(st)
	if rv != "" {
		msg = fmt.Sprintf("%s (resourceVersion %s)", msg, rv)
	}
	switch st.Code() {
	case codes.OutOfRange:
		return apierrors.NewResourceExpired(msg)
	case codes.DeadlineExceeded:
		if reason == reasonTooLarge {
			return tooLargeResourceVersion(msg)
		}
		return apierrors.NewTimeoutError(msg, 1)
	case codes.ResourceExhausted, codes.Unavailable:
		return apierrors.NewTooManyRequests(msg, 1)
	case codes.InvalidArgument:
		return apierrors.NewBadRequest(msg)
	case codes.NotFound:
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: msg,
		}}
	case codes.Unauthenticated:
		return apierrors.NewUnauthorized(msg)
	case codes.PermissionDenied:
		return forbidden(st)
	case codes.Canceled:
		return context.Canceled
	default:
		return apierrors.NewInternalError(errors.New(msg))
	}
}

// forbidden is the API server's 403 for a refusal by its authorization: the
// message is kube-fanout's, which is the API server's own words
// (`configmaps is forbidden: User "alice" cannot list resource
// "configmaps" in API group "" in the namespace "a"`), and the details name
// what the ErrorInfo names, as apierrors.NewForbidden fills them.
func forbidden(st *status.Status) error {
	details := &metav1.StatusDetails{}
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok && info.GetReason() == reasonForbidden {
			md := info.GetMetadata()
			details = &metav1.StatusDetails{Group: md["group"], Kind: md["resource"], Name: md["name"]}
		}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: st.Message(), Details: details,
	}}
}

// tooLargeResourceVersion is the error the API server gives for a
// resourceVersion newer than it holds, the one client-go's reflector
// recognises (it then relists from the freshest state).
func tooLargeResourceVersion(msg string) error {
	err := apierrors.NewTimeoutError(msg, 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}

// errorInfo is the reason and resourceVersion of the status's
// google.rpc.ErrorInfo, if it has one.
func errorInfo(st *status.Status) (reason, rv string) {
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			return info.GetReason(), info.GetMetadata()["resourceVersion"]
		}
	}
	return "", ""
}
