#include "server/certs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace lockstep::server {
namespace {

// Names become file names and certificate subjects: keep them plain.
absl::Status CheckName(const std::string& name, absl::string_view field) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", name, "\" must be 1 to 64 bytes"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' &&
        c != ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", name, "\" may hold only letters, digits and - _ . :"));
    }
  }
  return absl::OkStatus();
}

bool IsIpAddress(const std::string& host) {
  if (absl::StrContains(host, ':')) return true;
  for (char c : host) {
    if (!absl::ascii_isdigit(c) && c != '.') return false;
  }
  return true;
}

// Where openssl's chatter goes; its tail is quoted when a command fails.
std::string& OpensslLog() {
  static std::string* path = new std::string();
  return *path;
}

// Runs openssl with `args` (no shell), its output in OpensslLog(); INTERNAL
// quoting that output when it fails.
absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string program = "openssl";
  argv.push_back(program.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd =
        open(OpensslLog().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execvp("openssl", argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::ifstream log(OpensslLog());
  std::string output((std::istreambuf_iterator<char>(log)),
                     std::istreambuf_iterator<char>());
  return absl::InternalError(absl::StrCat(
      output.substr(0, 1000), "\n", "openssl ", absl::StrJoin(args, " "),
      " failed (exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
      WIFEXITED(status) && WEXITSTATUS(status) == 127
          ? "; is the openssl command installed?"
          : "",
      ")"));
}

absl::Status NewKey(const std::string& path) {
  LS_RETURN_IF_ERROR(Openssl({"genpkey", "-algorithm", "EC", "-pkeyopt",
                              "ec_paramgen_curve:P-256", "-out", path}));
  if (chmod(path.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("chmod 0600 ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// A certificate for `cn` signed by the CA in `dir`, with the extensions of
// section `ext` of `config`.
absl::Status Issue(const std::string& dir, const std::string& stem,
                   const std::string& cn, const std::string& config,
                   const std::string& ext, int days) {
  const std::string key = absl::StrCat(dir, "/", stem, ".key");
  const std::string csr = absl::StrCat(dir, "/", stem, ".csr");
  const std::string crt = absl::StrCat(dir, "/", stem, ".crt");
  LS_RETURN_IF_ERROR(NewKey(key));
  LS_RETURN_IF_ERROR(
      Openssl({"req", "-new", "-key", key, "-subj", absl::StrCat("/CN=", cn),
               "-config", config, "-out", csr}));
  LS_RETURN_IF_ERROR(Openssl(
      {"x509", "-req", "-in", csr, "-CA", absl::StrCat(dir, "/ca.crt"),
       "-CAkey", absl::StrCat(dir, "/ca.key"), "-CAcreateserial", "-CAserial",
       absl::StrCat(dir, "/ca.srl"), "-days", absl::StrCat(days), "-extfile",
       config, "-extensions", ext, "-out", crt}));
  std::remove(csr.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteTestCertificates(const CertsOptions& o) {
  if (o.out_dir.empty()) {
    return absl::InvalidArgumentError("--out_dir: must be set");
  }
  if (o.days < 1 || o.days > 3650) {
    return absl::InvalidArgumentError(
        absl::StrCat("--days: ", o.days, " is outside 1..3650"));
  }
  if (o.hosts.empty()) {
    return absl::InvalidArgumentError("--hosts: name at least one host");
  }
  for (const std::string& h : o.hosts)
    LS_RETURN_IF_ERROR(CheckName(h, "--hosts"));
  std::vector<std::string> stems = {"ca", "server", "client"};
  for (const std::string& w : o.workers) {
    LS_RETURN_IF_ERROR(CheckName(w, "--workers"));
    stems.push_back(absl::StrCat("worker-", w));
  }
  if (mkdir(o.out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out_dir: cannot create ", o.out_dir, ": ", std::strerror(errno)));
  }
  for (const std::string& stem : stems) {
    for (const char* ext : {".crt", ".key"}) {
      const std::string path = absl::StrCat(o.out_dir, "/", stem, ext);
      struct stat st;
      if (stat(path.c_str(), &st) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--out_dir: ", path,
                         " exists; certificates are never overwritten"));
      }
    }
  }

  // The extensions each kind of certificate gets.
  std::string sans;
  int dns = 0;
  int ip = 0;
  for (const std::string& h : o.hosts) {
    absl::StrAppend(&sans,
                    IsIpAddress(h) ? absl::StrCat("IP.", ++ip)
                                   : absl::StrCat("DNS.", ++dns),
                    " = ", h, "\n");
  }
  const std::string config = absl::StrCat(o.out_dir, "/openssl.cnf");
  OpensslLog() = absl::StrCat(o.out_dir, "/openssl.log");
  {
    std::ofstream f(config);
    f << "[req]\ndistinguished_name = dn\n[dn]\n"
      << "[ca_ext]\nbasicConstraints = critical, CA:TRUE\n"
      << "keyUsage = critical, keyCertSign, cRLSign\n"
      << "subjectKeyIdentifier = hash\n"
      << "[server_ext]\nbasicConstraints = CA:FALSE\n"
      << "keyUsage = critical, digitalSignature\n"
      << "extendedKeyUsage = serverAuth\nsubjectAltName = @server_sans\n"
      << "[client_ext]\nbasicConstraints = CA:FALSE\n"
      << "keyUsage = critical, digitalSignature\n"
      << "extendedKeyUsage = clientAuth\n"
      << "[server_sans]\n"
      << sans;
    if (!f) {
      return absl::InternalError(absl::StrCat("cannot write ", config));
    }
  }
  const std::string& dir = o.out_dir;
  LS_RETURN_IF_ERROR(NewKey(absl::StrCat(dir, "/ca.key")));
  LS_RETURN_IF_ERROR(Openssl(
      {"req", "-new", "-x509", "-key", absl::StrCat(dir, "/ca.key"), "-subj",
       "/CN=Lockstep test CA", "-days", absl::StrCat(o.days), "-config", config,
       "-extensions", "ca_ext", "-out", absl::StrCat(dir, "/ca.crt")}));
  LS_RETURN_IF_ERROR(Issue(dir, "server", "lockstep-coordinator", config,
                           "server_ext", o.days));
  LS_RETURN_IF_ERROR(
      Issue(dir, "client", "lockstep-client", config, "client_ext", o.days));
  for (const std::string& w : o.workers) {
    LS_RETURN_IF_ERROR(Issue(dir, absl::StrCat("worker-", w), w, config,
                             "client_ext", o.days));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::server
