// fp8ctl version: this client's build and the coordinator's, as the running coordinator
// reports it (GetVersion), and the protocol each speaks.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/message_document.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"
#include "common/version/version.h"

namespace fp8::ctl {
namespace {

v1::GetVersionResponse client_version() {
  v1::GetVersionResponse v;
  v.set_version(kVersion);
  v.set_protocol(v1::GetVersionResponse::descriptor()->file()->package());
  return v;
}

// {"client": {"version", "protocol"}, "server": {..., "address"}} (no server when it was
// not asked or did not answer).
Document version_document(const v1::GetVersionResponse& client, const v1::GetVersionResponse* server,
                         const std::string& address) {
  Document doc = Document::object();
  doc.set("client", message_document(client));
  if (server != nullptr) doc.set("server", message_document(*server).set("address", Document::of_string(address)));
  return doc;
}

std::string version_line(const char* who, const v1::GetVersionResponse& v, const std::string& where) {
  return absl::StrFormat("%-8s%-10s protocol %s%s\n", who, v.version(), v.protocol(),
                         where.empty() ? "" : absl::StrCat("   (", where, ")"));
}

}  // namespace

Verb add_version_verb(CLI::App& app) {
  struct Args {
    bool client_only = false;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "version", "print fp8ctl's version and the coordinator's (as it reports it), with the protocol each speaks");
  cmd->fallthrough();
  cmd->add_flag("--client", a->client_only, "only fp8ctl's own version; do not contact the coordinator");
  add_output_flag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            const v1::GetVersionResponse client = client_version();
            std::optional<v1::GetVersionResponse> server;
            std::optional<CliError> error;
            if (!a->client_only) {
              if (auto e = session.connect()) {
                error = *e;
              } else {
                v1::GetVersionResponse response;
                auto ctx = session.context();
                if (grpc::Status s = session.stub().GetVersion(ctx.get(), v1::GetVersionRequest(), &response);
                    s.ok()) {
                  server = response;
                } else {
                  error = session.error(s, "version");
                }
              }
            }
            // The client's part prints even when the coordinator cannot be asked (as
            // kubectl does); the exit code then says why the server's is missing.
            if (a->output == OutputFormat::kTable) {
              std::cout << version_line("client", client, "");
              if (server.has_value()) std::cout << version_line("server", *server, session.config().coordinator);
            } else {
              print_document(version_document(client, server ? &*server : nullptr, session.config().coordinator),
                            a->output);
            }
            std::cout.flush();
            if (error.has_value()) return report(*error);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
