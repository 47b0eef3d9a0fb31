// The engine's status macros are the project's (common/status_macros.h).
#pragma once

#include "common/status_macros.h"
