#include "worker/cmd/flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "daemon: coordinator address, host:port");
ABSL_FLAG(std::string, name, "",
          "daemon: worker name, unique in the fleet (default: the host name)");
ABSL_FLAG(std::string, token, "",
          "daemon: bearer token of the worker role (else --token_file, else "
          "$LOCKSTEP_TOKEN)");
ABSL_FLAG(std::string, token_file, "",
          "daemon: file whose first line is the bearer token");
ABSL_FLAG(std::string, ca, "",
          "daemon: PEM CA of the coordinator's certificate: connect over TLS");
ABSL_FLAG(std::string, cert, "",
          "daemon: PEM certificate of this worker (mutual TLS; its CN must "
          "be --name); needs --key and --ca");
ABSL_FLAG(std::string, key, "", "daemon: PEM private key of --cert");
ABSL_FLAG(std::string, labels, "",
          "daemon: comma-separated key=value labels, e.g. rack=a1,pool=ci");
ABSL_FLAG(std::string, machine_id_file, "",
          "probe, daemon: file holding this machine's id (default: "
          "/etc/machine-id, then /var/lib/dbus/machine-id, then the boot id); "
          "for containers that share one id, or several simulated machines "
          "on one host");
ABSL_FLAG(int, slots, 1, "daemon: runs executed at the same time");
ABSL_FLAG(int64_t, initial_backoff_ms, 200,
          "daemon: first reconnect delay, ms (doubles up to the max)");
ABSL_FLAG(int64_t, max_backoff_ms, 5000, "daemon: longest reconnect delay, ms");
ABSL_FLAG(bool, json, false,
          "probe: print the profile as JSON; selftest: print the report as "
          "JSON");
ABSL_FLAG(std::string, model, "", "run: model file (JSON or text proto)");
ABSL_FLAG(std::string, config, "", "run: job config file (JSON or text proto)");
ABSL_FLAG(int, runs, 1, "run: number of runs to train and compare");
ABSL_FLAG(std::string, inject_fault, "",
          "run, daemon: flip one bit, step=S,layer=L,role=R,bit=B[,element=E]"
          "[,slot=X]; run: into run 1 when --runs >= 2; daemon: into every "
          "run this worker executes (a drill: the worker reports it in its "
          "hardware profile)");
ABSL_FLAG(std::string, inject_stall, "",
          "daemon: a drill for hung runs, step=S,seconds=N[,model=NAME]: the "
          "run process sleeps N s before step S");
ABSL_FLAG(bool, allow_drills, false,
          "daemon: allow the drill flags --inject_fault and --inject_stall "
          "(refused without it)");
ABSL_FLAG(std::string, data_root, "",
          "run, daemon: the directory file datasets are read from: "
          "dataset.file paths must resolve, symbolic links included, to "
          "regular files under it (empty: file datasets are refused)");
ABSL_FLAG(std::string, blob_cache_dir, "lockstep-blob-cache",
          "daemon/execute: folder of the cache of models' initial parameters "
          "fetched from the coordinator");
ABSL_FLAG(int64_t, blob_cache_bytes, int64_t{4} << 30,
          "daemon: bytes the parameter cache keeps (least recently used "
          "blobs are evicted first)");
ABSL_FLAG(bool, selftest, true,
          "daemon: run the selftest (as `lockstep-worker selftest`) at start "
          "and report it in the hardware profile; the coordinator "
          "quarantines a worker whose selftest fails");
ABSL_FLAG(int64_t, run_timeout_s, 3600,
          "daemon: wall-clock limit of one run, s");
ABSL_FLAG(int64_t, run_memory_limit_mb, 0,
          "daemon: memory limit of each run process (RLIMIT_DATA), MiB; 0 "
          "derives it from the job's size (512 MiB + 4 x its live tensor "
          "bytes; none for runs that may use a GPU), -1 sets none");
ABSL_FLAG(int64_t, run_cpu_limit_s, 0,
          "daemon: CPU-time limit of each run process (RLIMIT_CPU, all "
          "threads), s; 0 derives it from the job's size and steps, -1 sets "
          "none");
ABSL_FLAG(std::string, dump, "",
          "run: write tensors as .npy: first_divergent, all or "
          "<layer>:<role>[:step]");
ABSL_FLAG(std::string, dump_dir, "lockstep-dump",
          "run: directory for --dump files");
ABSL_FLAG(bool, device_resident, true,
          "run: on the CUDA backend keep the run's tensors on the device "
          "between kernels; false copies every kernel's tensors in and out "
          "(the same bits, slower)");
ABSL_FLAG(bool, queue_device_fingerprints, true,
          "run: in a device-resident run, queue the device fingerprints and "
          "collect each step's results at its end; false waits for each "
          "tensor's result (the same bits, slower)");
ABSL_FLAG(bool, op_times, false,
          "run: after each run, print its wall time per step by op (on "
          "CUDA the host's time unless CUDA_LAUNCH_BLOCKING=1)");
ABSL_FLAG(bool, op_times_by_layer, false,
          "run: like --op_times (implied), one line per layer and op");
ABSL_FLAG(std::string, ops, "",
          "selftest: comma-separated ops to test, e.g. "
          "dense.forward,conv2d.grad_weight (default: all)");
ABSL_FLAG(std::string, seed, "1",
          "selftest: seed of the test inputs (unsigned 32-bit)");

namespace lockstep::worker::cmd {

ProbeCommandOptions ProbeOptionsFromFlags() {
  ProbeCommandOptions options;
  options.json = absl::GetFlag(FLAGS_json);
  return options;
}

RunCommandOptions RunOptionsFromFlags() {
  RunCommandOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.config_path = absl::GetFlag(FLAGS_config);
  options.runs = absl::GetFlag(FLAGS_runs);
  options.inject_fault = absl::GetFlag(FLAGS_inject_fault);
  options.dump = absl::GetFlag(FLAGS_dump);
  options.device_resident = absl::GetFlag(FLAGS_device_resident);
  options.queue_device_fingerprints =
      absl::GetFlag(FLAGS_queue_device_fingerprints);
  options.op_times = absl::GetFlag(FLAGS_op_times);
  options.op_times_by_layer = absl::GetFlag(FLAGS_op_times_by_layer);
  options.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  return options;
}

ExecuteCommandOptions ExecuteOptionsFromFlags() {
  ExecuteCommandOptions options;
  options.inject_fault = absl::GetFlag(FLAGS_inject_fault);
  options.inject_stall = absl::GetFlag(FLAGS_inject_stall);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  options.blob_cache_dir = absl::GetFlag(FLAGS_blob_cache_dir);
  return options;
}

DaemonCommandOptions DaemonOptionsFromFlags() {
  DaemonCommandOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.name = absl::GetFlag(FLAGS_name);
  options.labels = absl::GetFlag(FLAGS_labels);
  options.slots = absl::GetFlag(FLAGS_slots);
  options.initial_backoff_ms = absl::GetFlag(FLAGS_initial_backoff_ms);
  options.max_backoff_ms = absl::GetFlag(FLAGS_max_backoff_ms);
  options.inject_fault = absl::GetFlag(FLAGS_inject_fault);
  options.inject_stall = absl::GetFlag(FLAGS_inject_stall);
  options.allow_drills = absl::GetFlag(FLAGS_allow_drills);
  options.data_root = absl::GetFlag(FLAGS_data_root);
  options.selftest = absl::GetFlag(FLAGS_selftest);
  options.blob_cache_dir = absl::GetFlag(FLAGS_blob_cache_dir);
  options.blob_cache_bytes = absl::GetFlag(FLAGS_blob_cache_bytes);
  options.run_timeout_s = absl::GetFlag(FLAGS_run_timeout_s);
  options.run_memory_limit_mb = absl::GetFlag(FLAGS_run_memory_limit_mb);
  options.run_cpu_limit_s = absl::GetFlag(FLAGS_run_cpu_limit_s);
  options.token = absl::GetFlag(FLAGS_token);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  options.ca = absl::GetFlag(FLAGS_ca);
  options.cert = absl::GetFlag(FLAGS_cert);
  options.key = absl::GetFlag(FLAGS_key);
  return options;
}

SelftestCommandOptions SelftestOptionsFromFlags() {
  SelftestCommandOptions options;
  options.ops = absl::GetFlag(FLAGS_ops);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.json = absl::GetFlag(FLAGS_json);
  return options;
}

SystemProbeOptions SystemProbeOptionsFromFlags() {
  SystemProbeOptions options;
  options.machine_id_file = absl::GetFlag(FLAGS_machine_id_file);
  return options;
}

}  // namespace lockstep::worker::cmd
