// The API's declared limits (proto/fp8/v1/limits.proto): every field of every request that
// can grow has one, and a message over one is refused naming the field and the limit.
#include "common/rpc/request_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "fp8/v1/job_service.pb.h"
#include "fp8/v1/rendezvous_service.pb.h"
#include "fp8/v1/trainer_service.pb.h"
#include "fp8/v1/worker_service.pb.h"
#include "google/protobuf/descriptor.h"

namespace fp8::rpc {
namespace {

TEST(RequestLimitsTest, EveryRequestOfEveryServiceIsBounded) {
  int methods = 0;
  // Each service through a message of its file (which links the file in).
  for (const google::protobuf::Descriptor* in_file :
       {v1::SubmitJobRequest::descriptor(), v1::HeartbeatRequest::descriptor(),
        v1::ReportProgressRequest::descriptor(), v1::RendezvousSetRequest::descriptor()}) {
    ASSERT_EQ(in_file->file()->service_count(), 1) << in_file->file()->name();
    const google::protobuf::ServiceDescriptor* service = in_file->file()->service(0);
    for (int m = 0; m < service->method_count(); ++m) {
      const google::protobuf::MethodDescriptor& method = *service->method(m);
      ++methods;
      const std::vector<std::string> unbounded = unbounded_fields(*method.input_type());
      EXPECT_TRUE(unbounded.empty()) << method.full_name() << " (" << method.input_type()->full_name()
                                     << ") has fields without a limit: " << absl::StrJoin(unbounded, ", ");
    }
  }
  EXPECT_GE(methods, 20);
}

TEST(RequestLimitsTest, OversizeFieldsAreNamedWithTheirLimit) {
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_name("ok");
  EXPECT_TRUE(check_request_limits(submit).ok());

  for (int i = 0; i < 65; ++i) (*submit.mutable_spec()->mutable_labels())["k" + std::to_string(i)] = "v";
  absl::Status s = check_request_limits(submit);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.labels: 65 entries, more than the limit of 64");

  submit.mutable_spec()->clear_labels();
  (*submit.mutable_spec()->mutable_labels())["k"] = std::string(257, 'v');
  EXPECT_EQ(check_request_limits(submit).message(), "spec.labels (a value): 257 bytes, more than the limit of 256");

  submit.mutable_spec()->clear_labels();
  submit.mutable_spec()->mutable_data()->set_path(std::string(1 << 20, 'p'));
  s = check_request_limits(submit);
  EXPECT_TRUE(absl::StartsWith(s.message(), "spec: 10485")) << s;  // the spec whole, before its fields
  EXPECT_TRUE(absl::EndsWith(s.message(), " bytes, more than the limit of 65536")) << s;

  v1::RegisterWorkerRequest worker;
  worker.set_version(std::string(1 << 20, '1'));
  EXPECT_EQ(check_request_limits(worker).message(), "version: 1048576 bytes, more than the limit of 64");

  v1::AppendLogsRequest logs;
  logs.add_lines()->set_text(std::string(5000, 'x'));
  EXPECT_EQ(check_request_limits(logs).message(), "lines[0].text: 5000 bytes, more than the limit of 4096");

  // A JobSpec on its own (fp8ctl, before sending), with a prefix for its paths.
  v1::JobSpec spec;
  spec.mutable_fp8()->add_include(std::string(300, '*'));
  EXPECT_EQ(check_request_limits(spec, "spec.").message(), "spec.fp8.include[0]: 300 bytes, more than the limit of 256");
}

TEST(RequestLimitsTest, QuotesAreCut) {
  EXPECT_EQ(quote_for_error("job-7"), "job-7");
  const std::string long_id(10000, 'j');
  const std::string quoted = quote_for_error(long_id);
  EXPECT_EQ(quoted, std::string(64, 'j') + "... (10000 bytes)");
  // Never in the middle of a UTF-8 character.
  const std::string accents = std::string(63, 'a') + "\xc3\xa9" + "zzz";
  EXPECT_EQ(quote_for_error(accents), std::string(63, 'a') + "... (68 bytes)");
}

}  // namespace
}  // namespace fp8::rpc
