package nodeid

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// From the review of the protocol (REVP-3, fixed: timeouts are retried). classify maps every "get identity: get credentials:"
// error without an HTTP answer to ErrAccessDenied, which acquisition treats
// as fatal ("retrying will not help"). But a credential provider that is
// merely slow (the ECS task-role or IMDS endpoint throttled or briefly
// unreachable, or the request's own timeout ending while credentials are
// being fetched) fails with the same prefix: a transient hiccup then ends
// the acquisition with exit 2 instead of a retry.
func TestSlowCredentialEndpointIsRetryable(t *testing.T) {
	slow := aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		<-ctx.Done() // the role endpoint does not answer in time
		return aws.Credentials{}, ctx.Err()
	})
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:1"),
		UsePathStyle: true,
		Credentials:  aws.NewCredentialsCache(slow),
	})
	repo, err := NewS3Repository(client, "bucket", "", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = repo.List(context.Background())
	t.Logf("list error: %v", err)
	if errors.Is(err, ErrAccessDenied) || IsPermanent(err) {
		t.Fatalf("a credential endpoint that timed out once is classified as %v (fatal=%v); want a retryable ErrUnavailable", err, IsPermanent(err))
	}
}
