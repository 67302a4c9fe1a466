// Command gosdk runs the AWS SDK for Go v2, unmodified, against a permafrost server: a conditional write
// (PutObject with If-None-Match: * twice: the first succeeds, the second is a 412 PreconditionFailed API error)
// and GetObjectAttributes (ETag, ObjectSize; ObjectParts of a multipart object when the server returns them).
//
// Configuration from the environment: PERMAFROST_ENDPOINT (http://127.0.0.1:PORT), PERMAFROST_BUCKET (an
// existing bucket), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY. Path-style addressing, region us-east-1.
// Exits 0 when every answer is as AWS documents it; otherwise prints each mismatch and exits 1.
package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// partBytes is the size of the multipart object's first part (S3's minimum for every part but the last).
const partBytes = 5 << 20

var failures []string

func fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	failures = append(failures, msg)
	fmt.Fprintln(os.Stderr, "MISMATCH:", msg)
}

func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Fprintf(os.Stderr, "gosdk: %s is not set\n", name)
		os.Exit(2)
	}
	return v
}

func md5ETag(body []byte) string {
	sum := md5.Sum(body)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func main() {
	endpoint, bucket := env("PERMAFROST_ENDPOINT"), env("PERMAFROST_BUCKET")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(
			env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), "")),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gosdk: loading the SDK configuration:", err)
		os.Exit(2)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	})

	conditionalWrite(ctx, client, bucket)
	attributes(ctx, client, bucket)

	if len(failures) > 0 {
		fmt.Fprintf(os.Stderr, "gosdk: %d mismatch(es)\n", len(failures))
		os.Exit(1)
	}
	fmt.Println("gosdk: all answers as documented")
}

// conditionalWrite: PutObject with IfNoneMatch "*" twice.
func conditionalWrite(ctx context.Context, client *s3.Client, bucket string) {
	key := "go-sdk/lock"
	body := []byte("first writer wins")
	first, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body), IfNoneMatch: aws.String("*"),
	})
	if err != nil {
		fail("first PutObject with IfNoneMatch *: %v", err)
		return
	}
	if aws.ToString(first.ETag) != md5ETag(body) {
		fail("first PutObject: ETag %s, want %s", aws.ToString(first.ETag), md5ETag(body))
	}
	fmt.Println("PutObject IfNoneMatch=* (absent): 200, ETag", aws.ToString(first.ETag))

	_, err = client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("second writer")),
		IfNoneMatch: aws.String("*"),
	})
	var api smithy.APIError
	var resp *awshttp.ResponseError
	switch {
	case err == nil:
		fail("second PutObject with IfNoneMatch *: succeeded, want 412 PreconditionFailed")
	case !errors.As(err, &api):
		fail("second PutObject: %v is not an API error", err)
	case api.ErrorCode() != "PreconditionFailed":
		fail("second PutObject: error code %q, want PreconditionFailed (%v)", api.ErrorCode(), err)
	case !errors.As(err, &resp) || resp.HTTPStatusCode() != 412:
		fail("second PutObject: %v, want HTTP status 412", err)
	default:
		fmt.Println("PutObject IfNoneMatch=* (exists): 412", api.ErrorCode())
	}

	got, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		fail("HeadObject after the refused write: %v", err)
	} else if aws.ToString(got.ETag) != aws.ToString(first.ETag) {
		fail("the refused write changed the object: ETag %s, want %s", aws.ToString(got.ETag), aws.ToString(first.ETag))
	}
}

// attributes: GetObjectAttributes of a single-part and of a two-part object.
func attributes(ctx context.Context, client *s3.Client, bucket string) {
	wanted := []types.ObjectAttributes{
		types.ObjectAttributesEtag, types.ObjectAttributesObjectSize, types.ObjectAttributesObjectParts,
	}
	single := []byte("attributes of a small object")
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String("go-sdk/single"), Body: bytes.NewReader(single),
	}); err != nil {
		fail("PutObject go-sdk/single: %v", err)
		return
	}
	a, err := client.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{
		Bucket: aws.String(bucket), Key: aws.String("go-sdk/single"), ObjectAttributes: wanted,
	})
	if err != nil {
		fail("GetObjectAttributes go-sdk/single: %v", err)
		return
	}
	// GetObjectAttributes gives the ETag without quotes.
	if etag := aws.ToString(a.ETag); strings.Trim(etag, `"`) != strings.Trim(md5ETag(single), `"`) {
		fail("GetObjectAttributes go-sdk/single: ETag %s, want %s", etag, md5ETag(single))
	}
	if aws.ToInt64(a.ObjectSize) != int64(len(single)) {
		fail("GetObjectAttributes go-sdk/single: ObjectSize %d, want %d", aws.ToInt64(a.ObjectSize), len(single))
	}
	fmt.Println("GetObjectAttributes single: ETag", aws.ToString(a.ETag), "ObjectSize", aws.ToInt64(a.ObjectSize))

	key := "go-sdk/multipart"
	upload, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
	})
	if err != nil {
		fail("CreateMultipartUpload: %v", err)
		return
	}
	parts := [][]byte{bytes.Repeat([]byte{'a'}, partBytes), []byte("the last part")}
	var completed []types.CompletedPart
	for i, body := range parts {
		number := aws.Int32(int32(i + 1))
		p, err := client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: upload.UploadId, PartNumber: number,
			Body: bytes.NewReader(body),
		})
		if err != nil {
			fail("UploadPart %d: %v", i+1, err)
			return
		}
		completed = append(completed, types.CompletedPart{
			PartNumber: number, ETag: p.ETag,
			ChecksumCRC32: p.ChecksumCRC32, ChecksumCRC32C: p.ChecksumCRC32C, ChecksumCRC64NVME: p.ChecksumCRC64NVME,
			ChecksumSHA1: p.ChecksumSHA1, ChecksumSHA256: p.ChecksumSHA256,
		})
	}
	done, err := client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: upload.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	})
	if err != nil {
		fail("CompleteMultipartUpload: %v", err)
		return
	}
	a, err = client.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ObjectAttributes: wanted,
	})
	if err != nil {
		fail("GetObjectAttributes %s: %v", key, err)
		return
	}
	size := int64(len(parts[0]) + len(parts[1]))
	if strings.Trim(aws.ToString(a.ETag), `"`) != strings.Trim(aws.ToString(done.ETag), `"`) {
		fail("GetObjectAttributes %s: ETag %s, want %s", key, aws.ToString(a.ETag), aws.ToString(done.ETag))
	}
	if !strings.HasSuffix(aws.ToString(a.ETag), "-2") && !strings.HasSuffix(aws.ToString(a.ETag), `-2"`) {
		fail("GetObjectAttributes %s: ETag %s does not end in -2", key, aws.ToString(a.ETag))
	}
	if aws.ToInt64(a.ObjectSize) != size {
		fail("GetObjectAttributes %s: ObjectSize %d, want %d", key, aws.ToInt64(a.ObjectSize), size)
	}
	if a.ObjectParts != nil {
		if n := aws.ToInt32(a.ObjectParts.TotalPartsCount); n != 2 {
			fail("GetObjectAttributes %s: ObjectParts.TotalPartsCount %d, want 2", key, n)
		}
		fmt.Println("GetObjectAttributes multipart: ObjectParts.TotalPartsCount", aws.ToInt32(a.ObjectParts.TotalPartsCount),
			"listed", len(a.ObjectParts.Parts))
	} else {
		fmt.Println("GetObjectAttributes multipart: no ObjectParts returned")
	}
	fmt.Println("GetObjectAttributes multipart: ETag", aws.ToString(a.ETag), "ObjectSize", aws.ToInt64(a.ObjectSize))
}
