#include "status.h"

#include <new>
#include <stdexcept>

namespace customops::ort {

OrtStatusPtr guarded(const std::function<void()>& fn) noexcept {
  const OrtApi& api = Ort::GetApi();
  try {
    fn();
    return nullptr;
  } catch (const std::invalid_argument& error) {
    return api.CreateStatus(ORT_INVALID_ARGUMENT, error.what());
  } catch (const Ort::Exception& error) {
    return api.CreateStatus(error.GetOrtErrorCode(), error.what());
  } catch (const std::bad_alloc&) {
    return api.CreateStatus(ORT_FAIL, "customops: out of memory");
  } catch (const std::exception& error) {
    return api.CreateStatus(ORT_FAIL, error.what());
  } catch (...) {
    return api.CreateStatus(ORT_FAIL, "customops: unknown error");
  }
}

}  // namespace customops::ort
