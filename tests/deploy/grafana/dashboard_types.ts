// The shape a dashboard JSON file must have, built from @grafana/schema's types.
//
// check_dashboards.sh inlines each deploy/grafana/*.json as an object literal and writes
//   const dashboard = <json> satisfies DashboardJson;
// next to this file's copy, so tsc checks every property of the literal: wrong types,
// missing required fields and properties the schema does not know (excess property
// checks only apply to object literals, which is why the JSON is inlined, not imported).
//
// Two adjustments to the published types, both about JSON rather than TypeScript:
// * @grafana/schema declares many fields as TypeScript string enums (FieldColorModeId,
//   ThresholdsMode, MappingType, LegendDisplayMode, ...). A JSON string such as
//   "palette-classic" is never assignable to a string enum, so Json<T> turns every string
//   enum into the union of its values (`${Enum}`); numeric enums accept their member
//   values as they are.
// * The schema's Panel has `type: string`, `options: Record<string, unknown>` and
//   `targets: Array<Record<string, unknown>>`. Panels here must be one of the plugin types
//   in PanelTypes, whose options and fieldConfig.defaults.custom are checked against that
//   plugin's published panelcfg types, and targets are Prometheus queries (the Prometheus
//   query model is not in @grafana/schema; PromQuery below lists its fields).
// * Annotations are Grafana's built-in one or Prometheus queries (PromAnnotation): a
//   PromQuery target plus the fields Grafana's Prometheus data source reads from the
//   annotation itself (titleFormat, textFormat, tagKeys, useValueForTime), which the
//   schema's AnnotationQuery does not list.
import type {
  AnnotationQuery,
  Dashboard,
  DataQuery,
  FieldConfig,
  FieldConfigSource,
  Panel,
  RowPanel,
} from '@grafana/schema';
import type * as barGauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as heatmap from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as stateTimeline from '@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen';
import type * as table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as timeSeries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

// The JSON form of a TypeScript type: string enums become their string values.
export type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Array<Json<U>>
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

// A Prometheus target (the fields Grafana's Prometheus data source saves).
export interface PromQuery extends Omit<DataQuery, 'datasource'> {
  datasource?: { type?: 'prometheus'; uid?: string };
  editorMode?: 'code' | 'builder';
  exemplar?: boolean;
  expr: string;
  format?: 'time_series' | 'table' | 'heatmap';
  instant?: boolean;
  interval?: string;
  intervalFactor?: number;
  legendFormat?: string;
  range?: boolean;
}

// No custom field config: the plugin publishes none (stat, gauge).
type NoCustom = Record<string, never>;

type TypedFieldConfigSource<Custom> = Omit<Json<FieldConfigSource>, 'defaults'> & {
  defaults: Omit<Json<FieldConfig>, 'custom'> & { custom?: Json<Custom> };
};

type TypedPanel<Type extends string, Options, Custom> = Omit<
  Json<Panel>,
  'type' | 'options' | 'fieldConfig' | 'targets'
> & {
  type: Type;
  options?: Json<Options>;
  fieldConfig?: TypedFieldConfigSource<Custom>;
  targets?: PromQuery[];
};

// Panel plugin id -> its typed panel.
export interface PanelTypes {
  bargauge: TypedPanel<'bargauge', barGauge.Options, NoCustom>;
  heatmap: TypedPanel<'heatmap', heatmap.Options, heatmap.FieldConfig>;
  stat: TypedPanel<'stat', stat.Options, NoCustom>;
  'state-timeline': TypedPanel<'state-timeline', stateTimeline.Options, stateTimeline.FieldConfig>;
  table: TypedPanel<'table', table.Options, table.FieldConfig>;
  timeseries: TypedPanel<'timeseries', timeSeries.Options, timeSeries.FieldConfig>;
}
export type AnyPanel = PanelTypes[keyof PanelTypes];

export type RowJson = Omit<Json<RowPanel>, 'panels'> & { panels: AnyPanel[] };

// A Prometheus annotation query. Grafana's Prometheus data source marks each time step at
// which a series of the query is above 0 (steps apart by at most one step make one
// region), titled and tagged from the series' labels.
export type PromAnnotation = Omit<Json<AnnotationQuery>, 'target'> & {
  target: PromQuery;
  titleFormat?: string;
  textFormat?: string;
  // Comma-separated label names whose values become the annotation's tags.
  tagKeys?: string;
  useValueForTime?: boolean;
};

export type DashboardJson = Omit<Json<Dashboard>, 'panels' | 'annotations'> & {
  panels?: Array<AnyPanel | RowJson>;
  annotations?: { list?: Array<Json<AnnotationQuery> | PromAnnotation> };
};
