// Data-parallel training across processes (MPI): which rank this process is, and the errors and
// exits that must be handled the same on every rank. `mpirun -np N tapegrad train ...` starts N
// copies of the same command; each takes its shard of every global batch, the gradients are summed
// across ranks during backward, and every rank applies the same update (src/train/distributed.cpp,
// docs/distributed.md). Rank 0 alone logs, validates and writes the run directory.
//
// MPI is touched only when the process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE or
// PMIx's PMIX_RANK in the environment) and only by training: a plain `tapegrad train`, and every
// other command, never initialises it. A build without MPI runs single-process as before and refuses
// a launch by mpirun with more than one rank.
#pragma once

#include <string>

#include "tapegrad/error.hpp"
#include "tapegrad/train.hpp"

namespace tapegrad::train {

/// This process's place in a data-parallel run.
struct World {
  int rank = 0;           ///< 0 .. size-1; rank 0 logs, validates and writes checkpoints
  int size = 1;           ///< ranks in the run (1 without mpirun)
  bool launched = false;  ///< started by mpirun (then MPI is initialised, also for one rank)
};

/// The world of this process. The first call initialises MPI when the process was launched by mpirun
/// (and registers its finalisation at exit); throws Error when launched with several ranks by a build
/// without MPI.
const World& world();

/// True when MPI support was compiled in.
bool mpi_available();

/// A refusal every rank reaches with the same message at the same point (options differing across
/// ranks, an empty shard): each rank exits normally with code 2, rank 0 alone printing the line.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// The layout line rank 0 prints first: "data-parallel: 2 ranks, 8 sequences per rank per step,
/// buckets of 4 MiB" (a range such as 8-9 when the batch does not divide). Throws CollectiveError when
/// --batch-size is below the number of ranks (a rank would get an empty shard) or --bucket-mb is out
/// of range.
std::string data_parallel_layout(const TrainOptions& options);

/// Ends every rank of the run after an error only this rank saw (so the others are not left waiting
/// in a collective): MPI_Abort with `code`. Returns (doing nothing) when this is the only rank.
void abort_world(int code);

}  // namespace tapegrad::train
