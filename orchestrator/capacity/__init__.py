"""Capacity a spec can reserve: SageMaker flexible training plans.

`offerings`: which of a spec's instance types a plan can hold, the SearchTrainingPlanOfferings
requests for them, and their answers ranked cheapest first beside the on-demand bound.
`plans`: CreateTrainingPlan, ListTrainingPlans and DescribeTrainingPlan, read into `Plan`, the
ledger jobs that used each, and the online check of a spec's plan (`doctor --quotas`).
The sweep's admission by a plan's free instances is `orchestrator.sweep.plan_capacity`.
docs/USAGE.md, "Capacity you can reserve", says how the commands use them.
"""
