// fp8ctl's pure parts: tables, progress lines and ETA, the status -> exit code mapping, and
// where the token comes from.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/document.h"
#include "client/fp8ctl/inspect.h"
#include "client/fp8ctl/jobs_table.h"
#include "client/fp8ctl/message_document.h"
#include "client/fp8ctl/numerics_groups.h"
#include "client/fp8ctl/progress_csv.h"
#include "client/fp8ctl/svg_plot.h"
#include "common/jobspec/loader.h"

#include "client/fp8ctl/client_config.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/follow_printer.h"
#include "client/fp8ctl/follow_summary.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/rpc_errors.h"
#include "client/fp8ctl/table.h"
#include "gtest/gtest.h"

#ifndef FP8_SOURCE_DIR
#error "FP8_SOURCE_DIR must name the repository root"
#endif

namespace fp8::ctl {
namespace {

TEST(Fp8ctlTableTest, AlignsColumnsAndTrimsTheLastOne) {
  Table t({"ID", "NAME", "STATE"});
  t.add_row({"job-1", "a", "RUNNING"});
  t.add_row({"job-10", "longer-name", "QUEUED"});
  EXPECT_EQ(t.render(),
            "ID       NAME          STATE\n"
            "job-1    a             RUNNING\n"
            "job-10   longer-name   QUEUED\n");
}

TEST(Fp8ctlTableTest, PadsShortRowsAndCountsCharactersNotBytes) {
  Table t({"A", "B"});
  t.add_row({"é"});
  t.add_row({"xy", "z"});
  EXPECT_EQ(t.render(),
            "A    B\n"
            "é\n"
            "xy   z\n");
  EXPECT_EQ(display_width("héllo"), 5u);
}

TEST(Fp8ctlFormatTest, AgesAndClocks) {
  EXPECT_EQ(age(-5), "0s");
  EXPECT_EQ(age(45'000), "45s");
  EXPECT_EQ(age(12 * 60'000 + 5'000), "12m");
  EXPECT_EQ(age(3 * 3'600'000 + 4 * 60'000), "3h04m");
  EXPECT_EQ(age(2 * 86'400'000LL + 3 * 3'600'000), "2d03h");
  EXPECT_EQ(clock_duration(7), "0:07");
  EXPECT_EQ(clock_duration(754), "12:34");
  EXPECT_EQ(clock_duration(3723), "1:02:03");
  EXPECT_EQ(clock_duration(-1), "?");
  EXPECT_EQ(si_rate(950), "950");
  EXPECT_EQ(si_rate(12'345), "12.3k");
  EXPECT_EQ(si_rate(4'560'000), "4.56M");
  EXPECT_EQ(local_time(0), "-");
  EXPECT_EQ(job_state_name(v1::Job::RUNNING), "RUNNING");
  EXPECT_EQ(recipe_name(v1::Fp8Spec::ROWWISE_WITH_GW_HP), "rowwise_with_gw_hp");
}

TEST(Fp8ctlFormatTest, MeshSplitsTheRanksIntoDataAndTensorParallel) {
  v1::JobSpec spec;
  spec.mutable_resources()->set_world_size(2);
  EXPECT_EQ(mesh_text(spec), "2 data-parallel x 1 tensor-parallel ranks");  // no parallel section: FSDP
  spec.mutable_parallel()->set_tensor(2);
  EXPECT_EQ(mesh_text(spec), "1 data-parallel x 2 tensor-parallel ranks");
  spec.mutable_resources()->set_world_size(8);
  EXPECT_EQ(mesh_text(spec), "4 data-parallel x 2 tensor-parallel ranks");
}

// The ranks that train batches of their own, which scale rank 0's tokens/s to the job's
// (describe, follow, plot): tensor-parallel ranks share one batch.
TEST(Fp8ctlFormatTest, DataParallelRanksAreTheWorldOverTheTensorParallelRanks) {
  v1::JobSpec spec;
  EXPECT_EQ(data_parallel_ranks(spec), 1);  // nothing set
  spec.mutable_resources()->set_world_size(4);
  EXPECT_EQ(data_parallel_ranks(spec), 4);  // no parallel section: FSDP over all of them
  spec.mutable_parallel()->set_tensor(4);
  EXPECT_EQ(data_parallel_ranks(spec), 1);
  spec.mutable_parallel()->set_tensor(2);
  EXPECT_EQ(data_parallel_ranks(spec), 2);
}

TEST(Fp8ctlProgressLineTest, ShowsStepLossRateAndEta) {
  ProgressLineInput in;
  in.step = 20;
  in.total_steps = 40;
  in.loss = 3.45214;
  in.tokens_per_second = 12'345;
  in.eta_seconds = 12;
  EXPECT_EQ(progress_line(in), "step 20/40 (50%)  loss 3.4521  tok/s 12.3k  ETA 0:12");
  in.val_loss = 3.5;
  in.eta_seconds.reset();
  in.total_steps = 0;
  EXPECT_EQ(progress_line(in), "step 20  loss 3.4521  val 3.5000  tok/s 12.3k  ETA ?");
}

TEST(Fp8ctlEtaEstimatorTest, UsesTheRateOfTheCurrentAttempt) {
  EtaEstimator eta;
  EXPECT_FALSE(eta.seconds_left(100).has_value());
  eta.observe(1, 10, 1'000);
  EXPECT_FALSE(eta.seconds_left(100).has_value());  // one report: no rate yet
  eta.observe(1, 20, 3'000);                       // 10 steps in 2 s
  ASSERT_TRUE(eta.seconds_left(100).has_value());
  EXPECT_DOUBLE_EQ(*eta.seconds_left(100), 16.0);   // 80 steps left at 5 steps/s
  eta.observe(2, 10, 60'000);                      // a restart from a checkpoint: start over
  EXPECT_FALSE(eta.seconds_left(100).has_value());
  eta.observe(2, 100, 61'000);
  EXPECT_DOUBLE_EQ(*eta.seconds_left(100), 0.0);
}

v1::JobEvent progress_event(int64_t seq, int64_t step, int64_t ms) {
  v1::JobEvent e;
  e.set_sequence(seq);
  e.set_time_unix_ms(ms);
  e.mutable_progress()->set_attempt(1);
  v1::TrainingProgress* p = e.mutable_progress()->mutable_progress();
  p->set_step(step);
  p->set_time_unix_ms(ms);
  p->set_loss(2.5);
  p->set_tokens_per_second(1000);
  return e;
}

v1::JobEvent state_event(v1::Job::State from, v1::Job::State to, const std::string& reason = "") {
  v1::JobEvent e;
  e.set_time_unix_ms(1);
  e.mutable_state_change()->set_previous(from);
  e.mutable_state_change()->set_current(to);
  e.mutable_state_change()->set_reason(reason);
  return e;
}

TEST(Fp8ctlFollowPrinterTest, PrintsALinePerEventWhenNotATerminal) {
  std::ostringstream out;
  FollowPrinter p(out, /*terminal=*/false, /*total_steps=*/40, /*data_parallel_ranks=*/2);
  p.on_event(state_event(v1::Job::STATE_UNSPECIFIED, v1::Job::QUEUED, "submitted"));
  p.on_event(state_event(v1::Job::QUEUED, v1::Job::RUNNING));
  p.on_event(progress_event(2, 10, 10'000));
  p.on_event(progress_event(3, 20, 12'000));
  p.on_event(state_event(v1::Job::RUNNING, v1::Job::FAILED, "rank 1 exited 1"));
  p.finish();
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_NE(text.find("  state QUEUED: submitted\n"), std::string::npos) << text;
  EXPECT_NE(text.find("state QUEUED -> RUNNING\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step 10/40 (25%)  loss 2.5000  tok/s 2.0k  ETA ?\n"), std::string::npos) << text;
  EXPECT_NE(text.find("step 20/40 (50%)  loss 2.5000  tok/s 2.0k  ETA 0:04\n"), std::string::npos) << text;
  EXPECT_NE(text.find("state RUNNING -> FAILED: rank 1 exited 1\n"), std::string::npos) << text;
  ASSERT_TRUE(p.final_state().has_value());
  EXPECT_EQ(*p.final_state(), v1::Job::FAILED);
}

TEST(Fp8ctlFollowPrinterTest, RedrawsABarOnATerminalAndLeavesItAboveTheFinalState) {
  std::ostringstream out;
  FollowPrinter p(out, /*terminal=*/true, 40, 1);
  p.on_event(progress_event(1, 10, 10'000));
  p.on_event(progress_event(2, 20, 12'000));
  p.on_event(state_event(v1::Job::RUNNING, v1::Job::SUCCEEDED));
  p.print_summary();
  const std::string text = out.str();
  // Each progress report redraws the bar and line in place.
  EXPECT_NE(text.find("\r\x1b[K[######..................] step 10/40 (25%)"), std::string::npos) << text;
  EXPECT_NE(text.find("\r\x1b[K[############............] step 20/40 (50%)"), std::string::npos) << text;
  // The final state: the progress line is left as it was, the state line below it, then
  // the summary; the bar is not drawn again.
  const size_t last_bar = text.rfind("[############............] step 20/40");
  const size_t state = text.find("state RUNNING -> SUCCEEDED\n");
  ASSERT_NE(state, std::string::npos) << text;
  EXPECT_LT(last_bar, state) << text;
  EXPECT_EQ(text.find("\r", state), std::string::npos) << text;
  EXPECT_LT(state, text.find("Summary:\n")) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(Fp8ctlFollowPrinterTest, ABarIsStepOfTotal) {
  EXPECT_EQ(progress_bar(0, 40, 8), "[........]");
  EXPECT_EQ(progress_bar(20, 40, 8), "[####....]");
  EXPECT_EQ(progress_bar(40, 40, 8), "[########]");
  EXPECT_EQ(progress_bar(50, 40, 8), "[########]");
  EXPECT_EQ(progress_bar(5, 0, 4), "[....]");
}

v1::JobEvent attempt_started_event(int32_t attempt, int ranks, int64_t resumed_from, int64_t ms) {
  v1::JobEvent e;
  e.set_time_unix_ms(ms);
  v1::AttemptStarted* a = e.mutable_attempt_started();
  a->set_attempt(attempt);
  a->set_resumed_from_step(resumed_from);
  for (int r = 0; r < ranks; ++r) a->add_ranks()->set_rank(r);
  return e;
}

TEST(Fp8ctlFollowSummaryTest, LossStartToEndValidationTokensTimeAndRestarts) {
  FollowSummary s(/*total_steps=*/40, /*tokens_per_rank_step=*/100);
  s.on_event(attempt_started_event(1, 2, 0, 1'000));
  v1::JobEvent p = progress_event(1, 10, 2'000);
  p.mutable_progress()->mutable_progress()->set_loss(5.5);
  s.on_event(p);
  p = progress_event(2, 25, 3'000);  // the attempt dies after step 25; its checkpoint was 20
  p.mutable_progress()->mutable_progress()->set_val_loss(4.25);
  s.on_event(p);
  s.on_event(attempt_started_event(2, 1, 20, 10'000));  // resumed on one rank
  p = progress_event(3, 40, 75'000);
  p.mutable_progress()->set_attempt(2);
  p.mutable_progress()->mutable_progress()->set_loss(3.125);
  s.on_event(p);
  v1::JobEvent end = state_event(v1::Job::RUNNING, v1::Job::SUCCEEDED);
  end.set_time_unix_ms(76'000);
  s.on_event(end);
  // 25 steps x 2 ranks + 20 steps x 1 rank, 100 tokens each.
  EXPECT_EQ(s.tokens(), 7000);
  EXPECT_EQ(s.restarts(), 1);
  EXPECT_EQ(s.render(),
            "Summary:\n"
            "  outcome     SUCCEEDED at step 40/40\n"
            "  loss        5.5000 -> 3.1250 (step 10 -> 40)\n"
            "  validation  4.2500 (step 25)\n"
            "  tokens      7.0k\n"
            "  wall time   1:15\n"
            "  restarts    1\n"
            "  numerics    no events\n");
  FollowSummary nothing(10, 100);
  const std::string text = nothing.render();
  EXPECT_NE(text.find("- (no progress reported)"), std::string::npos) << text;
  EXPECT_NE(text.find("- (no evaluation ran)"), std::string::npos) << text;
}

// Two tensor-parallel ranks train one batch together: the progress line's rate is rank
// 0's (one data-parallel rank), and the summary counts each step's batch once.
TEST(Fp8ctlFollowPrinterTest, TensorParallelRanksCountOneBatch) {
  v1::JobSpec spec;
  spec.mutable_resources()->set_world_size(2);
  spec.mutable_parallel()->set_tensor(2);
  std::ostringstream out;
  FollowPrinter p(out, /*terminal=*/false, /*total_steps=*/40, data_parallel_ranks(spec),
                  /*tokens_per_rank_step=*/100, spec.parallel().tensor());
  p.on_event(attempt_started_event(1, 2, 0, 1'000));
  p.on_event(progress_event(2, 40, 12'000));
  p.on_event(state_event(v1::Job::RUNNING, v1::Job::SUCCEEDED));
  p.print_summary();
  const std::string text = out.str();
  EXPECT_NE(text.find("step 40/40 (100%)  loss 2.5000  tok/s 1.0k  "), std::string::npos) << text;
  // 40 steps x 1 data-parallel rank x 100 tokens.
  EXPECT_NE(text.find("  tokens      4.0k\n"), std::string::npos) << text;

  FollowSummary s(/*total_steps=*/40, /*tokens_per_rank_step=*/100, /*tensor_parallel=*/2);
  s.on_event(attempt_started_event(1, 4, 0, 1'000));  // 2 data-parallel x 2 tensor-parallel
  s.on_event(progress_event(2, 40, 12'000));
  EXPECT_EQ(s.tokens(), 8000);
}

v1::JobEvent numerics_event_at(int64_t step, v1::NumericsEvent::Kind kind, const std::string& layer,
                             v1::AmaxHistory::Operand operand) {
  v1::JobEvent e;
  e.set_job_id("job-4");
  e.set_time_unix_ms(1'000 + step);
  v1::NumericsEvent* n = e.mutable_numerics();
  n->set_kind(kind);
  n->set_attempt(1);
  n->set_step(step);
  n->set_layer(layer);
  n->set_operand(operand);
  n->set_value(1.5);
  n->set_threshold(1.0);
  n->set_message(absl::StrCat(layer, " saturated at step ", step));
  return e;
}

// A delayed-scaling job saturating one cast at every report: 40 events.
std::vector<v1::JobEvent> saturating_job() {
  std::vector<v1::JobEvent> events;
  for (int64_t step = 5; step <= 60; step += 5) {
    events.push_back(numerics_event_at(step, v1::NumericsEvent::SATURATION, "layers.0.attention.wq", v1::AmaxHistory::INPUT));
    events.push_back(numerics_event_at(step, v1::NumericsEvent::SATURATION, "layers.0.attention.wq", v1::AmaxHistory::WEIGHT));
  }
  events.push_back(numerics_event_at(7, v1::NumericsEvent::AMAX_JUMP, "layers.0.feed_forward.w2", v1::AmaxHistory::GRAD_OUTPUT));
  return events;
}

TEST(Fp8ctlNumericsTest, GroupsByKindLayerAndOperandWithACount) {
  NumericsGroups groups;
  int fresh = 0;
  for (const v1::JobEvent& e : saturating_job()) fresh += groups.add(e) ? 1 : 0;
  EXPECT_FALSE(groups.add(state_event(v1::Job::RUNNING, v1::Job::SUCCEEDED)));
  EXPECT_EQ(fresh, 3);
  EXPECT_EQ(groups.events(), 25);
  ASSERT_EQ(groups.groups().size(), 3u);
  const NumericsGroup& g = groups.groups()[0];
  EXPECT_EQ(group_name(g), "SATURATION layers.0.attention.wq input");
  EXPECT_EQ(g.count, 12);
  EXPECT_EQ(step_span(g), "steps 5-60");
  EXPECT_EQ(g.last.step(), 60);
  EXPECT_EQ(group_name(groups.groups()[2]), "AMAX_JUMP layers.0.feed_forward.w2 grad_output");
  EXPECT_EQ(step_span(groups.groups()[2]), "step 7");
  const std::string table = numerics_events_table(saturating_job());
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 26) << "a header and every event\n" << table;
  EXPECT_NE(table.find("TIME"), std::string::npos) << table;
}

TEST(Fp8ctlNumericsTest, FollowPrintsAGroupsFirstEventAndCountsTheRest) {
  std::ostringstream out;
  FollowPrinter p(out, /*terminal=*/false, 60, 1, 100);
  for (const v1::JobEvent& e : saturating_job()) p.on_event(e);
  p.on_event(state_event(v1::Job::RUNNING, v1::Job::SUCCEEDED));
  p.print_summary();
  const std::string text = out.str();
  size_t numerics_lines = 0;
  for (size_t at = text.find("numerics: "); at != std::string::npos; at = text.find("numerics: ", at + 1)) ++numerics_lines;
  EXPECT_EQ(numerics_lines, 3u) << text;
  EXPECT_NE(text.find("numerics: layers.0.attention.wq saturated at step 5 (repeats of it are counted in the summary)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  numerics    25 events of 3 kinds (fp8ctl events ID lists each)\n"
                      "    SATURATION layers.0.attention.wq input: 12 (steps 5-60)\n"
                      "    SATURATION layers.0.attention.wq weight: 12 (steps 5-60)\n"
                      "    AMAX_JUMP layers.0.feed_forward.w2 grad_output: 1 (step 7)\n"),
            std::string::npos)
      << text;
}

TEST(Fp8ctlRpcErrorsTest, MapsStatusCodesToExitCodes) {
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::OK), kExitOk);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::INVALID_ARGUMENT), kExitInvalidSpec);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::UNAVAILABLE), kExitUnreachable);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::DEADLINE_EXCEEDED), kExitUnreachable);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::UNAUTHENTICATED), kExitAuth);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::PERMISSION_DENIED), kExitAuth);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::NOT_FOUND), kExitNotFound);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::FAILED_PRECONDITION), kExitError);
  EXPECT_EQ(exit_code_for_status(grpc::StatusCode::INTERNAL), kExitError);
}

TEST(Fp8ctlRpcErrorsTest, MessagesSayWhereAndHowToFix) {
  const RpcTarget target{"10.0.0.1:7070", "FP8_TOKEN"};
  CliError e = from_rpc_status(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"), "list", target);
  EXPECT_EQ(e.exit_code, kExitUnreachable);
  EXPECT_NE(e.message.find("10.0.0.1:7070"), std::string::npos) << e.message;
  e = from_rpc_status(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "unknown token"), "list", target);
  EXPECT_EQ(e.exit_code, kExitAuth);
  EXPECT_NE(e.message.find("FP8_TOKEN"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("fp8-coordinator token"), std::string::npos) << e.message;
  e = from_rpc_status(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec.a: x\nspec.b: y"), "submit j.yaml", target);
  EXPECT_EQ(e.exit_code, kExitInvalidSpec);
  EXPECT_EQ(e.message, "submit j.yaml: rejected: spec.a: x\nsubmit j.yaml: rejected: spec.b: y");
  EXPECT_EQ(e.message.find('\n', e.message.find('\n') + 1), std::string::npos);
}

// A fake environment and file system for token resolution.
struct Fakes {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> files;
  EnvLookup env_lookup() const {
    return [this](const std::string& n) -> std::optional<std::string> {
      auto it = env.find(n);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
  }
  FileReader file_reader() const {
    return [this](const std::string& p) -> absl::StatusOr<std::string> {
      auto it = files.find(p);
      if (it == files.end()) return absl::NotFoundError("no such file");
      return it->second;
    };
  }
};

TEST(Fp8ctlTokenResolutionTest, FollowsThePrecedence) {
  Fakes f;
  f.env = {{"HOME", "/home/u"}, {"FP8_TOKEN", "env-token"}, {"FP8_TOKEN_FILE", "/env.token"}};
  f.files = {{"/flag.token", "flag-file-token\n"}, {"/env.token", " env-file-token "},
             {"./fp8-admin.token", "cwd-token\n"}, {"/home/u/.config/fp8ctl/token", "home-token"}};
  GlobalFlags flags;
  flags.token = "flag-token";
  flags.token_file = "/flag.token";

  auto source = [&]() {
    absl::StatusOr<ResolvedToken> t = resolve_token(flags, f.env_lookup(), f.file_reader());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->token + " <- " + t->source : std::string();
  };
  EXPECT_EQ(source(), "flag-token <- --token");
  flags.token.clear();
  EXPECT_EQ(source(), "env-token <- FP8_TOKEN");
  f.env.erase("FP8_TOKEN");
  EXPECT_EQ(source(), "flag-file-token <- --token-file /flag.token");
  flags.token_file.clear();
  EXPECT_EQ(source(), "env-file-token <- FP8_TOKEN_FILE /env.token");
  f.env.erase("FP8_TOKEN_FILE");
  EXPECT_EQ(source(), "cwd-token <- ./fp8-admin.token");
  f.files.erase("./fp8-admin.token");
  EXPECT_EQ(source(), "home-token <- /home/u/.config/fp8ctl/token");
  f.files.clear();
  absl::StatusOr<ResolvedToken> none = resolve_token(flags, f.env_lookup(), f.file_reader());
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("fp8-coordinator token"), std::string::npos);
}

TEST(Fp8ctlTokenResolutionTest, ANamedFileMustExistAndHoldAToken) {
  Fakes f;
  f.files = {{"/empty.token", "  \n"}, {"./fp8-admin.token", "cwd-token"}};
  GlobalFlags flags;
  flags.token_file = "/missing.token";
  absl::StatusOr<ResolvedToken> t = resolve_token(flags, f.env_lookup(), f.file_reader());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();  // no fallback to ./fp8-admin.token
  EXPECT_NE(t.status().message().find("--token-file /missing.token"), std::string::npos) << t.status();
  flags.token_file = "/empty.token";
  t = resolve_token(flags, f.env_lookup(), f.file_reader());
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_NE(t.status().message().find("empty"), std::string::npos) << t.status();
}

TEST(Fp8ctlClientConfigTest, CoordinatorFromFlagThenEnvThenDefault) {
  Fakes f;
  GlobalFlags flags;
  EXPECT_EQ(resolve_client_config(flags, f.env_lookup(), f.file_reader()).coordinator, "127.0.0.1:7070");
  f.env["FP8_COORDINATOR"] = "env:1";
  EXPECT_EQ(resolve_client_config(flags, f.env_lookup(), f.file_reader()).coordinator, "env:1");
  flags.coordinator = "flag:2";
  EXPECT_EQ(resolve_client_config(flags, f.env_lookup(), f.file_reader()).coordinator, "flag:2");
}

TEST(Fp8ctlOutputTest, DocumentsRenderAsReadableJsonAndBlockYaml) {
  Document job = Document::object();
  job.set("id", Document::of_string("job-1"))
      .set("spec", Document::object().set("name", Document::of_string("a")).set("labels", Document::object()))
      .set("state", Document::of_string("RUNNING"));
  Document doc = Document::object();
  doc.set("jobs", Document::array().add(job))
      .set("next", Document::of_string(""))
      .set("count", Document::of_int(3))
      .set("n", Document::of_bool(false))
      .set("s", Document::of_string("yes"))
      .set("reason", Document::of_string("QUEUED -> RUNNING <é> \"q\"\n"))
      .set("big", Document::of_int(int64_t{1} << 62))
      .set("none", Document());
  EXPECT_EQ(doc.json(),
            "{\n"
            "  \"jobs\": [\n"
            "    {\n"
            "      \"id\": \"job-1\",\n"
            "      \"spec\": {\n"
            "        \"name\": \"a\",\n"
            "        \"labels\": {}\n"
            "      },\n"
            "      \"state\": \"RUNNING\"\n"
            "    }\n"
            "  ],\n"
            "  \"next\": \"\",\n"
            "  \"count\": 3,\n"
            "  \"n\": false,\n"
            "  \"s\": \"yes\",\n"
            "  \"reason\": \"QUEUED -> RUNNING <é> \\\"q\\\"\\n\",\n"
            "  \"big\": 4611686018427387904,\n"
            "  \"none\": null\n"
            "}\n");
  EXPECT_EQ(doc.yaml(),
            "jobs:\n"
            "- id: job-1\n"
            "  spec:\n"
            "    name: a\n"
            "    labels: {}\n"
            "  state: RUNNING\n"
            "next: \"\"\n"
            "count: 3\n"
            "\"n\": false\n"
            "s: \"yes\"\n"
            "reason: \"QUEUED -> RUNNING <é> \\\"q\\\"\\n\"\n"
            "big: 4611686018427387904\n"
            "none: null\n");
  EXPECT_EQ(Document::array().json(), "[]\n");
  EXPECT_EQ(Document::object().yaml(), "{}\n");
}

TEST(Fp8ctlOutputTest, MessagesKeepFieldNamesWithRealNumbersAndReadableTimes) {
  v1::Job job;
  job.set_id("job-7");
  job.set_state(v1::Job::FAILED);
  job.set_last_checkpoint_step(20);
  job.set_created_unix_ms(1'700'000'000'123);  // the created_time asserted below
  job.set_failure_reason("attempt 1 -> FAILED");
  job.mutable_spec()->set_name("tiny");
  (*job.mutable_spec()->mutable_labels())["team"] = "b";
  (*job.mutable_spec()->mutable_labels())["area"] = "a";
  job.mutable_latest_progress()->set_loss(2.5);
  job.mutable_latest_progress()->set_step(int64_t{1} << 60);
  const Document d = message_document(job);
  const std::string json = d.json();
  EXPECT_NE(json.find("\"id\": \"job-7\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\": \"FAILED\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"last_checkpoint_step\": 20,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"step\": 1152921504606846976,"), std::string::npos) << "int64 as a number, exact\n" << json;
  EXPECT_NE(json.find("\"attempts\": 0,"), std::string::npos) << "zeros are printed\n" << json;
  EXPECT_NE(json.find("\"failure_reason\": \"attempt 1 -> FAILED\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"created_time\": \"2023-11-14T22:13:20.123Z\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"started_time\": null"), std::string::npos) << "0 is not yet\n" << json;
  EXPECT_EQ(json.find("_unix_ms"), std::string::npos) << json;
  EXPECT_NE(json.find("\"loss\": 2.5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"attempt_history\": []"), std::string::npos) << json;
  EXPECT_NE(json.find("\"labels\": {\n      \"area\": \"a\",\n      \"team\": \"b\"\n    }"), std::string::npos)
      << "a map sorted by key\n" << json;
  EXPECT_EQ(json.find("\"priority\""), std::string::npos) << "an unset optional is left out\n" << json;
  EXPECT_EQ(json.find("\"val_loss\""), std::string::npos) << json;
  EXPECT_EQ(json.find("\\u"), std::string::npos) << json;
  const std::string yaml = d.yaml();
  EXPECT_NE(yaml.find("\nlast_checkpoint_step: 20\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\ncreated_time: 2023-11-14T22:13:20.123Z\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nfailure_reason: attempt 1 -> FAILED\n"), std::string::npos) << yaml;

  // Floats print as the float they are; non-finite values as protobuf's JSON has them.
  v1::AmaxHistory h;
  h.add_history(0.1f);
  h.add_history(std::numeric_limits<float>::infinity());
  h.set_scale(std::numeric_limits<float>::quiet_NaN());
  const std::string amax = message_document(h).json();
  EXPECT_NE(amax.find("  \"history\": [\n    0.1,\n    \"Infinity\"\n  ]"), std::string::npos) << amax;
  EXPECT_NE(amax.find("\"scale\": \"NaN\""), std::string::npos) << amax;
}

TEST(Fp8ctlOutputTest, AFormatTheVerbDoesNotOfferIsAUsageErrorListingThem) {
  CLI::App app("t");
  OutputFormat format = OutputFormat::kTable;
  add_output_flag(&app, &format, {OutputFormat::kTable, OutputFormat::kName, OutputFormat::kJson});
  EXPECT_NO_THROW(app.parse(std::vector<std::string>{"name", "-o"}));  // reversed: "-o name"
  EXPECT_EQ(format, OutputFormat::kName);
  try {
    app.parse(std::vector<std::string>{"wide", "-o"});
    FAIL() << "-o wide was accepted";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("expected table, name or json, not 'wide'"), std::string::npos) << e.what();
  }
}

TEST(Fp8ctlListTest, WideAddsColumnsAndNamesAreKindSlashId) {
  v1::ListJobsResponse r;
  v1::Job* j = r.add_jobs();
  j->set_id("job-2");
  j->set_state(v1::Job::FAILED);
  j->set_created_unix_ms(1'000);
  j->set_attempts(2);
  j->set_restarts_left(0);
  j->set_failure_reason("rank 0 exited 1");
  j->mutable_spec()->set_name("tiny");
  j->mutable_spec()->set_priority(5);
  j->mutable_spec()->mutable_train()->set_steps(40);
  j->mutable_spec()->mutable_resources()->set_world_size(2);
  j->mutable_spec()->mutable_resources()->set_device(v1::ResourceSpec::CPU);
  j->mutable_spec()->mutable_fp8()->set_recipe(v1::Fp8Spec::ROWWISE);
  j->mutable_latest_progress()->set_step(20);
  j->mutable_latest_progress()->set_loss(3.25);
  const std::string narrow = jobs_table(r, 61'000, /*wide=*/false);
  EXPECT_EQ(narrow.substr(0, narrow.find('\n')), "ID      NAME   OWNER   STATE    PROGRESS   RECIPE    WORLD   SUBMITTED             AGE   REASON");
  EXPECT_EQ(narrow.find("LOSS"), std::string::npos);
  const std::string wide = jobs_table(r, 61'000, /*wide=*/true);
  for (const char* part : {"DEVICE", "PRIORITY", "LOSS", "ATTEMPTS", "RESTARTS LEFT", "CHECKPOINT", "FINISHED", "REASON",
                           " cpu ", " 5 ", " 3.2500 ", "rank 0 exited 1\n"}) {
    EXPECT_NE(wide.find(part), std::string::npos) << part << "\n" << wide;
  }
  EXPECT_EQ(job_name("job-2"), "job/job-2");
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

PlotDocument two_jobs_two_charts() {
  PlotDocument doc;
  doc.legend = {"job-3 tiny-cpu (tensorwise)", "job-4 tiny-cpu-delayed <&> (delayed)"};
  PlotChart loss{"loss", "step", {}};
  loss.series.push_back({{{10, 5.5}, {20, 4.0}, {30, 3.1}}});
  loss.series.push_back({{{10, 5.6}, {20, std::numeric_limits<double>::quiet_NaN()}, {30, 3.0}}});
  PlotChart tps{"tokens_per_second", "step", {}};
  tps.series.push_back({{{10, 12000}}});  // a single point
  tps.series.push_back({});               // nothing reported
  doc.charts = {loss, tps};
  return doc;
}

TEST(Fp8ctlSvgPlotTest, OnePolylinePerSeriesPerChartAndALegend) {
  const std::string svg = render_svg(two_jobs_two_charts());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg;
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<polyline"), 4u) << svg;
  EXPECT_EQ(count(svg, "<g class=\"chart\">"), 2u);
  EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_NE(svg.find(">job-3 tiny-cpu (tensorwise)</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("job-4 tiny-cpu-delayed &lt;&amp;&gt; (delayed)"), std::string::npos) << svg;
  EXPECT_NE(svg.find(series_colour(0)), std::string::npos);
  EXPECT_NE(svg.find(series_colour(1)), std::string::npos);
  EXPECT_NE(series_colour(0), series_colour(1));
  // NaN never reaches the coordinates; it is counted in the title instead.
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
  EXPECT_NE(svg.find("loss (1 non-finite value not drawn)"), std::string::npos) << svg;
  // The single point is drawn as a dot; the empty series still has its (empty) polyline.
  EXPECT_EQ(count(svg, "<circle"), 1u) << svg;
  EXPECT_NE(svg.find("points=\"\""), std::string::npos) << svg;
  // Tick labels on both axes.
  EXPECT_NE(svg.find(">30</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">step</text>"), std::string::npos) << svg;
}

TEST(Fp8ctlSvgPlotTest, DegenerateInputs) {
  PlotDocument doc;
  doc.legend = {"job-1 a (none)"};
  doc.charts.push_back({"loss", "step", {PlotSeries{{{5, std::nan("")}}}}});
  const std::string svg = render_svg(doc);
  EXPECT_EQ(count(svg, "<polyline"), 1u) << svg;
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(render_svg(PlotDocument{}).rfind("<svg", 0), 0u);
  EXPECT_EQ(nice_ticks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 1, 4), (std::vector<double>{0, 0.5, 1}));
}

TEST(Fp8ctlWorkersTest, Table) {
  v1::ListWorkersResponse r;
  v1::WorkerInfo* w = r.add_workers();
  w->set_worker_id("w-1");
  w->set_device_kind(v1::ResourceSpec::CPU);
  w->set_device_name("cpu");
  w->set_address("127.0.0.1:7071");
  w->set_state(v1::WorkerInfo::BUSY);
  w->set_last_heartbeat_unix_ms(100'000);
  v1::RankStatus* rank = w->add_ranks();
  rank->set_job_id("job-3");
  rank->set_rank(1);
  w->add_ranks()->set_rank(0);  // another user's job
  w = r.add_workers();
  w->set_worker_id("w-2");
  w->set_device_kind(v1::ResourceSpec::CPU);
  w->set_address("127.0.0.1:7072");
  w->set_state(v1::WorkerInfo::UNCONFIRMED);
  EXPECT_EQ(workers_table(r, 100'400),
            "NAME   DEVICE   ADDRESS          STATE         JOB/RANK                 LAST HEARTBEAT\n"
            "w-1    cpu      127.0.0.1:7071   BUSY          job-3 r1, (other user)   0.4s ago\n"
            "w-2    cpu      127.0.0.1:7072   UNCONFIRMED   -                        never\n");
  r.mutable_workers(0)->set_cpus(16);
  r.mutable_workers(0)->set_memory_gb(79.1);
  const std::string wide = workers_table(r, 100'400, /*wide=*/true);
  EXPECT_NE(wide.find("KIND   CPUS   MEMORY     RANK STATES        HEARTBEAT AT\n"), std::string::npos) << wide;
  EXPECT_NE(wide.find("   cpu    16     79.1 GiB   UNKNOWN, UNKNOWN   "), std::string::npos) << wide;
  EXPECT_NE(wide.find("   cpu    -      -          -   "), std::string::npos) << "unknown offers read -\n" << wide;
  EXPECT_EQ(heartbeat_age(1'000, 181'000), "3m ago");
  EXPECT_EQ(heartbeat_age(5'000, 1'000), "0.0s ago");
}

TEST(Fp8ctlAmaxTest, TableAndNoHistories) {
  v1::GetJobAmaxResponse r;
  EXPECT_EQ(amax_report("job-3", r),
            "job-3 has no amax histories: its recipe does not use delayed scaling, or it has not reported yet\n");
  r.set_step(40);
  v1::AmaxHistory* h = r.add_histories();
  h->set_layer("layers.0.attention.wq");
  h->set_operand(v1::AmaxHistory::GRAD_OUTPUT);
  for (float v : {0.5f, 2.0f, 1.25f}) h->add_history(v);
  h->set_scale(224.0f);
  EXPECT_EQ(amax_report("job-3", r),
            "job-3 amax histories at step 40 (1 casts)\n"
            "LAYER                   OPERAND       AMAX   HISTORY MAX   SCALE   LEN\n"
            "layers.0.attention.wq   grad_output   1.25   2             224     3\n");
  EXPECT_EQ(operand_name(v1::AmaxHistory::INPUT), "input");
  EXPECT_EQ(operand_name(v1::AmaxHistory::WEIGHT), "weight");
}

TEST(Fp8ctlCompletionTest, NamesVerbsAndFlags) {
  CLI::App app("test", "fp8ctl");
  std::string s;
  app.add_option("--coordinator", s, "");
  CLI::App* list = app.add_subcommand("list", "");
  list->add_option("--state", s, "");
  bool all_pages = false;
  list->add_flag("--all-pages", all_pages, "");
  CLI::App* describe = app.add_subcommand("describe", "");
  describe->add_option("ID", s, "");
  const std::string script = bash_completion_script(app);
  EXPECT_NE(script.find("local verbs=\"list describe\""), std::string::npos) << script;
  EXPECT_NE(script.find("--coordinator"), std::string::npos) << script;
  EXPECT_NE(script.find("list) flags=\"--help -h --state --all-pages\" ;;"), std::string::npos) << script;
  // Flags that take a value have their value completed (or left alone); plain flags don't.
  EXPECT_NE(script.find("      --coordinator) ((i++)) ;;"), std::string::npos) << script;
  EXPECT_EQ(script.find("--all-pages|"), std::string::npos) << script;
  EXPECT_EQ(script.find("|--all-pages)"), std::string::npos) << script;
  EXPECT_NE(script.find("describe)\n"), std::string::npos) << script;
  EXPECT_NE(script.find("complete -o default -F _fp8ctl fp8ctl"), std::string::npos) << script;
}

// A small app in fp8ctl's shape for the zsh and fish scripts: a global FILE flag, a verb
// with -o's words, a repeatable flag, and verbs taking a job id, ids, and a job.yaml.
struct SmallApp {
  CLI::App app{"test", "fp8ctl"};
  std::string s;
  std::vector<std::string> v;
  bool b = false;
  OutputFormat format = OutputFormat::kTable;
  SmallApp() {
    app.add_option("--token-file", s, "file holding the token (FP8_TOKEN_FILE; default x)")->type_name("FILE");
    CLI::App* list = app.add_subcommand("list", "list jobs, newest first (yours; an admin's: all)");
    add_output_flag(list, &format, {OutputFormat::kTable, OutputFormat::kName, OutputFormat::kJson});
    list->add_flag("--all-pages", b, "every page");
    app.add_subcommand("describe", "show a job: its [spec]")->add_option("ID", s, "job id");
    app.add_subcommand("plot", "plot jobs")->add_option("ID", v, "job ids");
    app.add_subcommand("submit", "submit job.yaml")->add_option("job.yaml", s, "the job");
  }
};

TEST(Fp8ctlCompletionTest, FishCompletesVerbsFlagValuesFilesAndJobIds) {
  SmallApp a;
  const std::string script = fish_completion_script(a.app);
  for (const char* line : {
           "complete -c fp8ctl -f\n",
           "complete -c fp8ctl -n __fish_use_subcommand -a list -d 'list jobs, newest first'\n",
           "complete -c fp8ctl -l token-file -r -F -d 'file holding the token'\n",
           "complete -c fp8ctl -n '__fish_seen_subcommand_from list' -l output -s o -x -a 'table name json' -d "
           "'table, name or json'\n",
           "complete -c fp8ctl -n '__fish_seen_subcommand_from list' -l all-pages -d 'every page'\n",
           "complete -c fp8ctl -n '__fish_seen_subcommand_from submit' -F\n",
           "complete -c fp8ctl -n '__fish_seen_subcommand_from describe plot' -a '(__fp8ctl_job_ids)' -d 'job'\n",
       }) {
    EXPECT_NE(script.find(line), std::string::npos) << line << "\n" << script;
  }
  EXPECT_NE(script.find("list -o name"), std::string::npos) << script;
}

TEST(Fp8ctlCompletionTest, ZshCompletesVerbsFlagValuesFilesAndJobIds) {
  SmallApp a;
  const std::string script = zsh_completion_script(a.app);
  EXPECT_EQ(script.rfind("#compdef fp8ctl\n", 0), 0u) << script;
  for (const char* part : {
           "    '*--token-file[file holding the token]:file:_files'\n",
           "    'list:list jobs, newest first'\n",
           "    'describe:show a job\\: its (spec)'\n",
           "            '*-o[table, name or json]:value:(table name json)' \\\n",
           "            '*--all-pages[every page]' \\\n",
           "            '1:job id:_fp8ctl_job_ids' \\\n",
           "            '*:job id:_fp8ctl_job_ids' \\\n",
           "            '1:job.yaml:_files -g \"*.(yaml|yml)\"' \\\n",
           "else compdef _fp8ctl fp8ctl; fi\n",
       }) {
    EXPECT_NE(script.find(part), std::string::npos) << part << "\n" << script;
  }
}

TEST(Fp8ctlProgressCsvTest, ARowPerJobAndStepQuotedWhereNeeded) {
  JobProgress a;
  a.job_id = "job-1";
  a.name = "tiny, \"big\"";
  a.recipe = "tensorwise";
  a.data_parallel_ranks = 2;
  a.by_step[5].set_loss(5.5);
  a.by_step[5].set_tokens_per_second(1000);
  a.by_step[10].set_loss(4.25);
  a.by_step[10].set_val_loss(4.5);
  a.by_step[10].set_tokens_per_second(1500);
  EXPECT_EQ(progress_csv({a}),
            "job_id,name,recipe,step,loss,val_loss,tokens_per_second\n"
            "job-1,\"tiny, \"\"big\"\"\",tensorwise,5,5.5,,2000\n"
            "job-1,\"tiny, \"\"big\"\"\",tensorwise,10,4.25,4.5,3000\n");
  EXPECT_EQ(progress_csv({}), "job_id,name,recipe,step,loss,val_loss,tokens_per_second\n");
  // Two tensor-parallel ranks train one batch: the job's rate is rank 0's.
  v1::JobSpec tensor_parallel;
  tensor_parallel.mutable_resources()->set_world_size(2);
  tensor_parallel.mutable_parallel()->set_tensor(2);
  JobProgress b;
  b.job_id = "job-2";
  b.name = "tp";
  b.recipe = "tensorwise";
  b.data_parallel_ranks = data_parallel_ranks(tensor_parallel);
  b.by_step[5].set_loss(5.5);
  b.by_step[5].set_tokens_per_second(1000);
  EXPECT_EQ(progress_csv({b}),
            "job_id,name,recipe,step,loss,val_loss,tokens_per_second\n"
            "job-2,tp,tensorwise,5,5.5,,1000\n");
}

// Every example job loads and validates with the loader `fp8ctl submit` and the
// coordinator use.
TEST(Fp8ctlExamplesTest, EveryExampleJobLoads) {
  const std::filesystem::path dir = std::filesystem::path(FP8_SOURCE_DIR) / "examples" / "jobs";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    names.push_back(entry.path().filename().string());
    absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(entry.path().string());
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
  }
  std::sort(names.begin(), names.end());
  for (const char* want : {"tiny-cpu.yaml", "tiny-cpu-rowwise.yaml", "tiny-cpu-rowwise-gw-hp.yaml",
                           "tiny-cpu-delayed.yaml", "tiny-cpu-none.yaml", "tiny-cpu-fsdp.yaml",
                           "tiny-cpu-tensor-parallel.yaml"}) {
    EXPECT_TRUE(std::find(names.begin(), names.end(), want) != names.end()) << want;
  }
}

}  // namespace
}  // namespace fp8::ctl
