// Mirrors torch/csrc/autograd/engine.cpp (Engine::execute, thread_init, thread_main,
// compute_dependencies, evaluate_function) and the generated backward nodes of
// torch/csrc/autograd/generated/Functions.cpp that the stand-in needs (MulBackward0,
// AddBackward0, SumBackward0, IndexBackward0, AccumulateGrad). A CUDA graph runs on the
// engine's device thread while the caller waits, as in the real engine.
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "torchlike/aten.h"

namespace torch::autograd {
namespace {

using at::Tensor;

// Mirrors AccumulateGrad: the leaf's .grad is the sum of what arrives.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::weak_ptr<at::TensorImpl> v) : variable(std::move(v)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (auto impl = variable.lock()) {
      if (!impl->grad) {
        impl->grad = grads[0].clone().impl();
      } else {
        impl->grad = at::_ops::add_Tensor::call(Tensor(impl->grad), grads[0]).impl();
      }
    }
    return {};
  }
  std::weak_ptr<at::TensorImpl> variable;
};

struct MulBackward0 : Node {
  double factor = 1;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    return {at::_ops::mul_Tensor::call(grads[0], at::wrapped_scalar({factor, at::kDouble}))};
  }
};

struct AddBackward0 : Node {
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {grads[0], grads[0]}; }
};

// Mirrors SumBackward0: grad.expand(self_sizes), a kernel that reads the device value.
struct SumBackward0 : Node {
  std::vector<int64_t> self_sizes;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0];
    Tensor out = at::empty(self_sizes, g.scalar_type(), g.device_type());
    at::detail::launch_on(g.device_type(), [out = at::detail::kernel_arg(out), g = at::detail::kernel_arg(g)] {
      const double v = at::load(g, 0);
      for (int64_t i = 0, n = out.numel(); i < n; ++i) at::store(out, i, v);
    });
    return {out};
  }
};

// Mirrors IndexBackward0: index_backward(grad.new_zeros(self_sizes), indices, grad), an
// index_put_ with accumulate, whose mask is expanded by nonzero() again.
struct IndexBackward0 : Node {
  std::vector<int64_t> self_sizes;
  std::vector<Tensor> indices;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor zeros = at::empty(self_sizes, grads[0].scalar_type(), grads[0].device_type());
    at::_ops::fill__Scalar::call(zeros, {0, at::kDouble});
    at::_ops::index_put_::call(zeros, indices, grads[0], true);
    return {zeros};
  }
};

// The edge to the node that computes an input's gradient (gradient_edge in variable.cpp).
std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  at::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->requires_grad) return nullptr;
  if (impl->grad_fn) return impl->grad_fn;
  return std::make_shared<AccumulateGrad>(t.impl());
}

void set_history(Tensor& out, std::shared_ptr<Node> node, std::initializer_list<const Tensor*> inputs) {
  bool any = false;
  for (const Tensor* in : inputs) {
    node->next_edges.push_back(gradient_edge(*in));
    any = any || node->next_edges.back() != nullptr;
  }
  if (!any) return;
  out.unsafeGetTensorImpl()->requires_grad = true;
  out.unsafeGetTensorImpl()->grad_fn = std::move(node);
}

// Mirrors compute_dependencies + the evaluate_function loop of one graph task.
TORCHLIKE_FRAME void run_graph_task(const std::shared_ptr<Node>& root, const Tensor& grad) {
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack{root.get()};
  std::unordered_map<Node*, bool> seen{{root.get(), true}};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& next : node->next_edges) {
      if (!next) continue;
      ++dependencies[next.get()];
      if (!seen[next.get()]) {
        seen[next.get()] = true;
        stack.push_back(next.get());
      }
    }
  }
  std::unordered_map<Node*, Tensor> buffers{{root.get(), grad}};
  std::deque<std::shared_ptr<Node>> ready{root};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.front();
    ready.pop_front();
    Tensor input = buffers[node.get()];
    buffers.erase(node.get());
    std::vector<Tensor> outputs = node->apply({input});
    for (std::size_t i = 0; i < node->next_edges.size() && i < outputs.size(); ++i) {
      const auto& next = node->next_edges[i];
      if (!next) continue;
      auto it = buffers.find(next.get());
      if (it == buffers.end()) {
        buffers.emplace(next.get(), outputs[i]);
      } else {
        it->second = at::_ops::add_Tensor::call(it->second, outputs[i]);
      }
      if (--dependencies[next.get()] == 0) ready.push_back(next);
    }
  }
}

struct ReadyQueue {
  std::mutex mutex;
  std::condition_variable not_empty;
  std::deque<std::function<void()>> tasks;
};

ReadyQueue& device_ready_queue() {
  static ReadyQueue* queue = new ReadyQueue;  // leaked: the device thread outlives exit
  return *queue;
}

Engine* (*default_engine_stub)() = nullptr;

}  // namespace

Engine& Engine::get_base_engine() {
  static Engine* engine = new Engine;
  return *engine;
}

void set_default_engine_stub(Engine* (*stub)()) { default_engine_stub = stub; }
Engine& get_default_engine() { return default_engine_stub ? *default_engine_stub() : Engine::get_base_engine(); }

// Mirrors Engine::thread_init: (the Python engine first gives the thread a PyThreadState).
TORCHLIKE_FRAME void Engine::thread_init(int) { thread_main(); }

// Mirrors Engine::thread_main: runs the device's ready queue for ever.
TORCHLIKE_FRAME void Engine::thread_main() {
  ReadyQueue& queue = device_ready_queue();
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(queue.mutex);
      queue.not_empty.wait(lock, [&] { return !queue.tasks.empty(); });
      task = std::move(queue.tasks.front());
      queue.tasks.pop_front();
    }
    task();
  }
}

// Mirrors Engine::execute: a graph whose root is on CUDA runs on the device thread (started
// once, start_device_threads) and the caller waits for the graph task's future.
TORCHLIKE_FRAME void Engine::execute(const Tensor& root, const Tensor& grad) {
  std::shared_ptr<Node> root_node = gradient_edge(root);
  TORCH_CHECK(root_node != nullptr, "element 0 of tensors does not require grad and does not have a grad_fn");
  if (!root.is_cuda()) {
    run_graph_task(root_node, grad);
    return;
  }
  static std::once_flag started;
  std::call_once(started, [this] { std::thread([this] { thread_init(0); }).detach(); });
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> future = done->get_future();
  {
    ReadyQueue& queue = device_ready_queue();
    std::lock_guard lock(queue.mutex);
    queue.tasks.push_back([root_node, grad, done] {
      try {
        run_graph_task(root_node, grad);
        done->set_value();
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
    queue.not_empty.notify_one();
  }
  future.get();
}

void record_mul_scalar(Tensor& out, const Tensor& self, double factor) {
  auto node = std::make_shared<MulBackward0>();
  node->factor = factor;
  set_history(out, node, {&self});
}

void record_add(Tensor& out, const Tensor& a, const Tensor& b) {
  set_history(out, std::make_shared<AddBackward0>(), {&a, &b});
}

void record_sum(Tensor& out, const Tensor& self) {
  auto node = std::make_shared<SumBackward0>();
  node->self_sizes = self.sizes();
  set_history(out, node, {&self});
}

void record_index(Tensor& out, const Tensor& self, const std::vector<Tensor>& indices) {
  auto node = std::make_shared<IndexBackward0>();
  node->self_sizes = self.sizes();
  node->indices = indices;
  set_history(out, node, {&self});
}

}  // namespace torch::autograd
