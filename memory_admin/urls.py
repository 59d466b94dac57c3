from django.urls import path

from memory_admin.api import api

urlpatterns = [
    path("api/v1/", api.urls),
]
