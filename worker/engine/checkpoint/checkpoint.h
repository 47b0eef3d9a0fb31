// Checkpoints of a training job: save and resume the model, optimizer, fp8 scaling state
// (amax histories, scales), data position and RNG of every rank.
//
// Guarantees:
//   - Atomic: every file is written as <name>.tmp, fsynced, renamed, and its directory
//     fsynced. A checkpoint exists only once its COMMITTED marker does, and the marker is
//     written after every rank's shard is durable.
//   - Checked: every byte on disk is covered by a CRC-32C (shard header, each payload,
//     shard index, footer, marker); a damaged, truncated or incomplete checkpoint is
//     reported with the file and the problem, and never loaded silently.
//   - Resume takes the newest good checkpoint (FindLatestGood), listing what it skipped,
//     whatever world size wrote it (a job of another size cuts the parameters anew:
//     worker/engine/train/checkpoint_rows.h).
//
// Where to look:
//   layout.h                on-disk names: <root>/step-00000200/rank-00000-of-00002.ckpt
//   shard_writer.h          write one rank's shard (records stream from caller memory)
//   shard_reader.h          read records into caller buffers, with dtype/shape checks
//   shard_format.h          the shard file format
//   commit_marker.h         the COMMITTED marker
//   save.h                  single-process save; the pieces of a distributed one
//   discovery.h             list checkpoints, find the one to resume from
//   committed_checkpoint.h  open a rank's shard of a committed checkpoint
//   retention.h             delete old checkpoints
//
// Typical resume:
//   ResumePoint resume = *find_latest_good(dir);
//   for (const std::string& w : resume.warnings) LOG(WARNING) << w;
//   if (resume.checkpoint) {  // written by as many ranks as this job has
//     ShardReader shard = *open_committed_shard(*resume.checkpoint, rank);
//     absl::Status s = shard.ReadTensor<float>("params/tok_embeddings", embeddings, {vocab / world, dim});
//     absl::StatusOr<int64_t> position = shard.ReadScalar<int64_t>("data/position");
//     ...
//   }
#pragma once

#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/committed_checkpoint.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/checkpoint/dtype.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/record_info.h"
#include "worker/engine/checkpoint/retention.h"
#include "worker/engine/checkpoint/save.h"
#include "worker/engine/checkpoint/shard_info.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/checkpoint/shard_writer.h"
