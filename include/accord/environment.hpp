// The environment variables accord's commands read (ACCORD_FAULTS,
// ACCORD_SECRET_FILE). The library reads none by itself; a service that
// wants their behaviour calls read_environment() and passes what it finds
// on as options.
#pragma once

#include "accord/error.hpp"
#include "runtime/base/environment.hpp"
