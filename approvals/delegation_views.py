"""An approver's delegations: who decides for them while they are away (approvals/models.py
Delegation; the decision service applies it). One small page: the list and a form."""

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import Role
from accounts.requests import SignedInRequest

from .models import Delegation

TEMPLATE = "approvals/delegation.html"


class DelegationForm(forms.ModelForm):
    starts = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    ends = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    class Meta:
        model = Delegation
        fields = ["delegate", "starts", "ends"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.user = user
        # Only another active approver: a delegation never gives anyone a role.
        self.fields["delegate"].queryset = (
            get_user_model()
            .objects.filter(is_active=True)
            .filter(Q(groups__name__in=[Role.APPROVER, Role.ADMIN]) | Q(is_superuser=True))
            .exclude(pk=user.pk)
            .distinct()
            .order_by("username")
        )

    def clean(self):
        data = super().clean()
        starts, ends = data.get("starts"), data.get("ends")
        if starts and ends and ends <= starts:
            self.add_error("ends", "must be after the start")
        if ends and ends <= timezone.now():
            self.add_error("ends", "must be in the future")
        return data


@require_http_methods(["GET", "POST"])
@login_required
def delegations(request: SignedInRequest) -> HttpResponse:
    if not request.user.can_approve:
        raise PermissionDenied
    status = 200
    if request.method == "POST":
        form = DelegationForm(request.POST, user=request.user)
        if form.is_valid():
            form.save()
            return redirect("approvals:delegations")
        status = 422
    else:
        now = timezone.now().replace(second=0, microsecond=0)
        form = DelegationForm(user=request.user, initial={"starts": now})
    context = {
        "form": form,
        "given": Delegation.objects.filter(user=request.user).select_related("delegate"),
        "received": Delegation.objects.filter(delegate=request.user).select_related("user"),
        "now": timezone.now(),
    }
    return render(request, TEMPLATE, context, status=status)


@require_POST
@login_required
def end_delegation(request: SignedInRequest, pk: int) -> HttpResponse:
    """End one of your delegations now (one not started yet is removed); an admin may end
    anyone's (someone who left)."""
    if not request.user.can_approve:
        raise PermissionDenied
    delegation = get_object_or_404(Delegation, pk=pk)
    if delegation.user_id != request.user.pk and not request.user.is_admin:
        raise Http404("no such delegation of yours")
    now = timezone.now()
    if delegation.starts >= now:
        delegation.delete()
    elif delegation.ends > now:
        Delegation.objects.filter(pk=delegation.pk).update(ends=now)
    return redirect("approvals:delegations")
