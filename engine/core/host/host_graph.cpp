// HostGraph (see engine/core/host/host_graph.h).
#include "engine/core/host/host_graph.h"

#include <lockstep/error.h>
#include "engine/core/host/host_stream.h"

namespace ls {

void HostGraph::launch(Stream& origin) {
  LS_CHECK(!capture_->streams.empty() && &origin == capture_->streams.front(),
           "graph launch: launch a graph on the stream its capture began on");
  for (const HostCapture::Node& node : capture_->nodes) {
    switch (node.kind) {
      case HostCapture::Kind::kWork: node.stream->enqueue(node.work, node.always_run); break;
      case HostCapture::Kind::kRecord: node.stream->record(*node.event); break;
      case HostCapture::Kind::kWait: node.stream->wait(*node.event); break;
      case HostCapture::Kind::kCall: node.work(); break;
    }
  }
}

}  // namespace ls
