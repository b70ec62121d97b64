#include "tapegrad/tapegrad.hpp"
using namespace tapegrad;

double readme_example() {
  Generator gen(0);
  Tensor x = Tensor::randn({4, 3}, gen);                       // a batch of 4 inputs
  Tensor w = Tensor::randn({2, 3}, gen).requires_grad_();      // a parameter: a leaf
  Tensor loss = cross_entropy(linear(x, w), Tensor::from_ids({0, 1, 1, 0}, {4}));
  std::cout << current_tape().dump();                          // linear, cross_entropy
  backward(loss);                                              // walk the tape in reverse
  std::cout << w.grad().to_string() << "\n";                   // d(loss)/dw, shape [2,3]
  return loss.item();
}
