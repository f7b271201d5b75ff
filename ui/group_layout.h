// The grouped layout of a large model (issue 16, item 4): nodes grouped by name scopes or repeated
// blocks (node_groups.h); a collapsed group is one box, an expanded one a frame holding its members
// laid out by the same engine as the plain layout (graph_layout_engine.h).
//
// Each level (the top level and every group) has its own skeleton: its members are its direct
// nodes and its child groups, one box each, with an edge wherever a tensor runs between two of
// them. Skeletons are built on first expansion and cached, so expanding a group runs the crossing
// reduction over that group's members only; the other levels are placed again (coordinates) with the
// new size of the group's frame. A tensor between two visible boxes in different groups is drawn as
// the edge of the level where their groups part, extended from the frame's port to the box inside.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "ui/graph_layout.h"
#include "ui/node_groups.h"

namespace qs::ui {

/// The workbench opens models with more nodes than this grouped (LayoutOptions::groupAbove).
constexpr int32_t kDefaultGroupAbove = 350;

/// Skeletons per level (-1: the top level, else the group), kept by the view between expansions.
using GroupSkeletonCache = std::map<int32_t, std::shared_ptr<const LayoutSkeleton>>;

/// `model` laid out with `grouping`: groups with `expanded[group]` set (and all their ancestors
/// expanded) are frames, the others boxes. `cache` (may be null) supplies and keeps the levels'
/// skeletons. Fails when cancelled or when igraph fails.
Result<std::shared_ptr<const GraphLayout>> computeGroupedLayout(std::shared_ptr<const Model> model,
                                                                std::shared_ptr<const NodeGrouping> grouping,
                                                                const std::vector<char>& expanded,
                                                                const LayoutOptions& options, GroupSkeletonCache* cache,
                                                                const LayoutProgress& progress = {},
                                                                const std::atomic<bool>* cancel = nullptr);

/// Which groups a model opens with expanded: the largest collapsed group that holds groups and more
/// than half of its level's nodes, and whose members (direct nodes and child groups) fit, is
/// expanded, repeatedly, while at most `budget` boxes show. So a wrapper such as "encoder" opens
/// and the blocks inside it stay collapsed.
std::vector<char> initialExpansion(const NodeGrouping& grouping, int32_t topLevelNodes, int32_t budget);

/// The layout a model opens with: grouped (initialExpansion with options.openVisibleBudget) when it
/// has more than options.groupAbove > 0 nodes and groupNodes finds groups; computeGraphLayout otherwise.
Result<std::shared_ptr<const GraphLayout>> computeModelLayout(std::shared_ptr<const Model> model,
                                                              const LayoutOptions& options,
                                                              const LayoutProgress& progress = {},
                                                              const std::atomic<bool>* cancel = nullptr);

}  // namespace qs::ui
