from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .models import Run


@require_GET
@login_required
def run_list(request):
    runs = Run.objects.visible_to(request.user)[:50]
    return render(request, "runs/run_list.html", {"runs": runs})
