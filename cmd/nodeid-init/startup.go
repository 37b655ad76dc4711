package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/nodeid/nodeid/nodeid"
)

// startupError is a storage answer before any lease was held that means the
// configuration is wrong (wrong region, endpoint or scheme, a redirect,
// access denied): exit 2 with the likely cause and what to fix, since a
// restart with the same settings fails the same way.
type startupError struct {
	cause, fix string
	err        error
}

func (e *startupError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.cause, e.fix, oneLine(e.err))
}

func (e *startupError) Unwrap() error { return e.err }

// classifyExit is applied to every command's final error. Before a lease is
// held, a permanent storage answer is explained as a configuration error
// (exit 2). During a tenure the same configuration has worked: a 403 then
// (a policy changed, credentials revoked) stays a storage error (exit 1).
func classifyExit(inv *invocation, err error) error {
	var ce *codeError
	var ue *usageError
	var se *nodeid.StorageError
	if err == nil || errors.As(err, &ce) || errors.As(err, &ue) || !errors.As(err, &se) ||
		errors.Is(err, nodeid.ErrLeaseLost) || !nodeid.IsPermanent(se) {
		return err
	}
	if inv.inTenure() {
		return &codeError{code: exitError, err: err}
	}
	if ste := explainStartup(inv.settingsOf(), err); ste != nil {
		return ste
	}
	return err
}

// explainStartup names the likely cause of a permanent storage error, from
// the SDK's typed errors (the HTTP status, the S3 error code), and the
// setting to fix; nil if it has nothing to add.
func explainStartup(s *settings, err error) *startupError {
	if s == nil {
		s = &settings{}
	}
	status, code := 0, ""
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var se *nodeid.StorageError
	if errors.As(err, &se) && se.Code == "NoCredentials" {
		code = se.Code // no answer: the library's code, not the server's
	}
	endpoint, endpointVar := s.endpointSetting()
	e := &startupError{err: err}
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		e.cause = "wrong endpoint scheme: the server answers plain HTTP to https://"
		e.fix = "use http:// in " + endpointVar
	case status == http.StatusBadRequest && code == "":
		e.cause = "the endpoint answered HTTP 400 without an S3 error code: not S3 speaking"
		e.fix = "check " + endpointVar
		if strings.HasPrefix(endpoint, "http://") {
			e.cause = "wrong endpoint scheme: the endpoint answered HTTP 400 without an S3 error code, as an HTTPS server answers plain HTTP"
			e.fix = "use https:// in " + endpointVar
		}
	case code == "AuthorizationHeaderMalformed":
		e.cause = "wrong region"
		e.fix = s.regionFix()
	case code == "PermanentRedirect" || status == http.StatusMovedPermanently:
		e.cause = "the bucket is not at this endpoint (HTTP 301: another region or endpoint)"
		e.fix = s.regionFix() + ", or " + endpointVar + " to the bucket's regional endpoint"
	case code == "NoCredentials":
		e.cause = "no usable AWS credentials"
		e.fix = "give the task a role (ECS task role), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
	case code == "SignatureDoesNotMatch":
		e.cause = "access denied: wrong secret key"
		e.fix = "check AWS_SECRET_ACCESS_KEY (or the profile or role the credentials come from)"
	case code == "InvalidAccessKeyId":
		e.cause = "access denied: unknown access key"
		e.fix = "check AWS_ACCESS_KEY_ID (or the profile or role the credentials come from)"
	case code == "AccessDenied":
		e.cause = "access denied"
		e.fix = fmt.Sprintf("give the credentials the IAM policy of docs/ecs.md on s3://%s/%s (bucket from %s)", s.bucket, s.prefix, s.sourceOf("bucket"))
	case errors.Is(err, nodeid.ErrAccessDenied): // no code: the SDK could not read the answer's body
		e.cause = "access denied"
		e.fix = fmt.Sprintf("check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the task role) and their IAM policy (docs/ecs.md) on s3://%s/%s", s.bucket, s.prefix)
	case nodeid.IsNoSuchBucket(err):
		e.cause = fmt.Sprintf("no such bucket %q", s.bucket)
		e.fix = "check " + s.sourceOf("bucket") + " (and " + endpointVar + ")"
	default:
		return nil
	}
	return e
}

// sourceOf names where an option's value came from: its flag or variable,
// else the variable to set.
func (s *settings) sourceOf(opt string) string {
	if src := s.sources[opt]; src != "" && src != "default" {
		return src
	}
	return envName(opt)
}

// endpointSetting returns the endpoint and the setting it came from (or
// the one to set, when it is AWS's default).
func (s *settings) endpointSetting() (string, string) {
	if s.endpoint != "" {
		return s.endpoint, s.sourceOf("s3-endpoint")
	}
	for _, v := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		if e := strings.TrimSpace(os.Getenv(v)); e != "" {
			return e, v
		}
	}
	return "", envName("s3-endpoint")
}

// regionFix says which setting to give the bucket's region.
func (s *settings) regionFix() string {
	if s.region != "" {
		return fmt.Sprintf("set %s (now %s) to the bucket's region", s.sourceOf("s3-region"), s.region)
	}
	if r := os.Getenv("AWS_REGION"); r != "" {
		return fmt.Sprintf("set %s (or AWS_REGION, now %s) to the bucket's region", envName("s3-region"), r)
	}
	return "set " + envName("s3-region") + " to the bucket's region"
}
