#include "client/fp8ctl/png_render.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace fp8::ctl {
namespace {

// The few declarations of librsvg, cairo and GLib this file calls, as their headers
// have them (opaque pointers, C ABI).
struct GError {
  uint32_t domain;
  int code;
  char* message;
};
struct RsvgRectangle {
  double x, y, width, height;
};
constexpr int kCairoFormatArgb32 = 0;
constexpr int kCairoStatusSuccess = 0;
constexpr int kCairoStatusWriteError = 11;
using CairoWrite = int (*)(void* closure, const unsigned char* data, unsigned int length);

struct Api {
  void* (*rsvg_handle_new_from_data)(const uint8_t* data, size_t length, GError** error);
  int (*rsvg_handle_get_intrinsic_size_in_pixels)(void* handle, double* width, double* height);
  int (*rsvg_handle_render_document)(void* handle, void* cr, const RsvgRectangle* viewport, GError** error);
  void (*g_object_unref)(void* object);
  void (*g_error_free)(GError* error);
  void* (*cairo_image_surface_create)(int format, int width, int height);
  void* (*cairo_create)(void* surface);
  void (*cairo_scale)(void* cr, double sx, double sy);
  void (*cairo_set_source_rgb)(void* cr, double r, double g, double b);
  void (*cairo_paint)(void* cr);
  void (*cairo_destroy)(void* cr);
  int (*cairo_surface_status)(void* surface);
  int (*cairo_surface_write_to_png_stream)(void* surface, CairoWrite write, void* closure);
  void (*cairo_surface_destroy)(void* surface);
};

// librsvg links cairo and GLib, so its handle resolves their functions too. Never
// dlclose()d: one process draws at most a few charts.
absl::StatusOr<Api> load_api() {
  void* handle = dlopen("librsvg-2.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "PNG needs librsvg (", why != nullptr ? why : "librsvg-2.so.2",
        "): install librsvg2-2 (apt-get install librsvg2-2), or write the chart as .svg or .csv"));
  }
  Api api{};
  std::string missing;
  const auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  resolve(api.rsvg_handle_new_from_data, "rsvg_handle_new_from_data");
  resolve(api.rsvg_handle_get_intrinsic_size_in_pixels, "rsvg_handle_get_intrinsic_size_in_pixels");
  resolve(api.rsvg_handle_render_document, "rsvg_handle_render_document");
  resolve(api.g_object_unref, "g_object_unref");
  resolve(api.g_error_free, "g_error_free");
  resolve(api.cairo_image_surface_create, "cairo_image_surface_create");
  resolve(api.cairo_create, "cairo_create");
  resolve(api.cairo_scale, "cairo_scale");
  resolve(api.cairo_set_source_rgb, "cairo_set_source_rgb");
  resolve(api.cairo_paint, "cairo_paint");
  resolve(api.cairo_destroy, "cairo_destroy");
  resolve(api.cairo_surface_status, "cairo_surface_status");
  resolve(api.cairo_surface_write_to_png_stream, "cairo_surface_write_to_png_stream");
  resolve(api.cairo_surface_destroy, "cairo_surface_destroy");
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("PNG needs librsvg 2.52 or newer; the librsvg-2.so.2 found lacks ", missing));
  }
  return api;
}

int append_bytes(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return kCairoStatusSuccess;
}

// Twice the SVG's own size, so that lines and text stay sharp on high-density screens.
constexpr double kScale = 2.0;

}  // namespace

absl::StatusOr<std::string> render_png(const std::string& svg) {
  absl::StatusOr<Api> loaded = load_api();
  if (!loaded.ok()) return loaded.status();
  const Api& api = *loaded;
  GError* error = nullptr;
  void* handle = api.rsvg_handle_new_from_data(reinterpret_cast<const uint8_t*>(svg.data()), svg.size(), &error);
  if (handle == nullptr) {
    absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("librsvg cannot read the chart: ", error != nullptr ? error->message : "unknown error"));
    if (error != nullptr) api.g_error_free(error);
    return s;
  }
  double width = 0, height = 0;
  if (!api.rsvg_handle_get_intrinsic_size_in_pixels(handle, &width, &height) || width <= 0 || height <= 0) {
    api.g_object_unref(handle);
    return absl::InvalidArgumentError("librsvg: the chart has no size in pixels (its <svg> needs width and height)");
  }
  const int w = static_cast<int>(std::ceil(width * kScale)), h = static_cast<int>(std::ceil(height * kScale));
  void* surface = api.cairo_image_surface_create(kCairoFormatArgb32, w, h);
  void* cr = api.cairo_create(surface);
  api.cairo_set_source_rgb(cr, 1.0, 1.0, 1.0);  // PNG viewers show transparency as black or a checkerboard
  api.cairo_paint(cr);
  api.cairo_scale(cr, kScale, kScale);
  const RsvgRectangle viewport{0, 0, width, height};
  const bool drawn = api.rsvg_handle_render_document(handle, cr, &viewport, &error) != 0;
  std::string png;
  int written = kCairoStatusWriteError;
  if (drawn) written = api.cairo_surface_write_to_png_stream(surface, append_bytes, &png);
  const int surface_status = api.cairo_surface_status(surface);
  api.cairo_destroy(cr);
  api.cairo_surface_destroy(surface);
  api.g_object_unref(handle);
  if (!drawn) {
    absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("librsvg cannot draw the chart: ", error != nullptr ? error->message : "unknown error"));
    if (error != nullptr) api.g_error_free(error);
    return s;
  }
  if (written != kCairoStatusSuccess || surface_status != kCairoStatusSuccess) {
    return absl::InternalError(absl::StrCat("cairo could not encode the PNG (cairo status ", written, ", surface ",
                                            surface_status, ")"));
  }
  return png;
}

}  // namespace fp8::ctl
