// Embedding lookup (gather rows of a table by id) and dropout (a seeded random mask).
#include <memory>

#include "src/ops/op_util.hpp"

namespace tapegrad {

using detail::visit_float;

namespace {

// What the embedding kernel computes, with recorded ops (its double backward goes through this):
// onehot(ids) [n, V] @ table [V, C], reshaped to [..., C]. ids: contiguous int32, checked by embedding.
// The one-hot holds n * V numbers: the double backward's price for using recorded ops only.
Tensor embedding_composite(const Tensor& table, const Tensor& ids) {
  const int64_t V = table.size(0), n = ids.numel();
  const int32_t* id = ids.data<int32_t>();
  std::vector<double> onehot(size_t(n * V), 0.0);
  for (int64_t i = 0; i < n; ++i) onehot[size_t(i * V + id[i])] = 1.0;
  Shape s = ids.shape();
  s.push_back(table.size(1));
  return reshape(matmul(Tensor::from_vector(onehot, {n, V}, table.dtype()), table), s);
}

}  // namespace

// table [V, C], ids int32 [...] -> [..., C]
Tensor embedding(const Tensor& table, const Tensor& ids) {
  detail::check_float(table, "embedding");
  detail::check_defined(ids, "embedding", "ids");
  if (table.ndim() != 2)
    throw ShapeError("embedding: table must be [V, C], got table=" + to_string(table.shape()) +
                     " ids=" + to_string(ids.shape()));
  if (ids.dtype() != DType::i32) throw DTypeError("embedding: ids must be int32, got " + ids.describe());
  const Tensor tc = detail::contiguous_data(table);
  const Tensor ic = detail::contiguous_data(ids);
  const int64_t V = table.size(0), C = table.size(1), n = ids.numel();
  const int32_t* id = ic.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= V)
      throw IndexError("embedding: id " + std::to_string(id[i]) + " at position " + std::to_string(i) +
                       " is outside [0, " + std::to_string(V) + ") for table=" + to_string(table.shape()) +
                       " ids=" + to_string(ids.shape()));
  Shape s = ids.shape();
  s.push_back(C);
  Tensor y = Tensor::empty(s, table.dtype());
  visit_float(table.dtype(), "embedding", [&]<class T>() {
    kernels::embedding<T>(n, C, tc.data<T>(), id, y.data<T>());
  });
  if (should_record({&table})) {
    record(OpKind::embedding, {table}, y, [table, ic, n, V, C](const Tensor& dy) {
      // dtable[ids[i]] += dy[i]  (repeated ids accumulate)
      if (creating_graph()) return backward_through([&] { return embedding_composite(table, ic); }, dy);
      bool fresh = false;
      Tensor dt = grad_buffer(table, &fresh);
      visit_float(table.dtype(), "backward", [&]<class T>() {
        kernels::embedding_backward<T>(n, C, V, ic.data<int32_t>(), dy.data<T>(), dt.data<T>(), !fresh);
      });
    });
  }
  return y;
}

Tensor dropout(const Tensor& x_in, double p, bool training, uint64_t seed) {
  detail::check_float(x_in, "dropout");
  detail::check_probability(p, "dropout: p");
  if (!training || p == 0) return x_in;
  const Tensor x = detail::contiguous_data(x_in);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  visit_float(x.dtype(), "dropout", [&]<class T>() {
    kernels::dropout<T>(x.numel(), x.data<T>(), p, seed, y.data<T>(), false);
  });
  if (should_record({&x_in})) {
    record(OpKind::dropout, {x_in}, y, [x_in, p, seed](const Tensor& dy) {
      // dx = dy * mask / (1 - p): the same kernel on dy, its mask drawn again from the seed
      if (creating_graph()) {  // the same, the factors a constant tensor
        Tensor factors = Tensor::empty(x_in.shape(), x_in.dtype());
        visit_float(x_in.dtype(), "backward", [&]<class T>() {
          const std::vector<T> ones(size_t(factors.numel()), T(1));
          kernels::dropout<T>(factors.numel(), ones.data(), p, seed, factors.data<T>(), false);
        });
        return accumulate_grad(x_in, mul(dy, factors));
      }
      bool fresh = false;  // a fresh gradient buffer is written, not zeroed and added to
      Tensor dx = grad_buffer(x_in, &fresh);
      const Tensor g = detail::contiguous_data(dy);
      visit_float(g.dtype(), "backward", [&]<class T>() {
        kernels::dropout<T>(g.numel(), g.data<T>(), p, seed, dx.data<T>(), !fresh);
      });
    });
  }
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0) return dropout(x, p, training, uint64_t(0));
  return dropout(x, p, training, gen.next_u64());
}

}  // namespace tapegrad
