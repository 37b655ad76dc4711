package main_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
)

// putObject writes an object unconditionally, as an operator or a chaos
// script would.
func putObject(t *testing.T, srv *s3test.Server, key, body string, meta map[string]string) {
	t.Helper()
	if _, err := srv.Client(t).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String(key), Body: strings.NewReader(body), Metadata: meta,
	}); err != nil {
		t.Fatal(err)
	}
}
