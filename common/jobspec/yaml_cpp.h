// yaml-cpp, included through here only.
//
// A trap worth knowing: yaml-cpp's iterators hand out temporaries, so
// `const YAML::Node& key = it->first;` dangles at the end of the statement. Copy nodes
// out of iterators instead (`YAML::Node key = it->first;`); a Node is a cheap handle.
// GCC 12 reports that mistake as -Wdangling-pointer inside yaml-cpp's node/impl.h.
#pragma once

#include "yaml-cpp/yaml.h"
